package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
)

// connectLogged is Connect with its log in a buffer (read it with the
// returned function: nats.go's callbacks write from their goroutine).
func connectLogged(t *testing.T, o Options) (*nats.Conn, func() string) {
	t.Helper()
	var buf strings.Builder
	var mu sync.Mutex
	o.Log, o.ReconnectWait = log.New(lockedWriter{&buf, &mu}, "", 0), 100*time.Millisecond
	nc, err := Connect(o)
	must(t, err)
	t.Cleanup(nc.Close)
	return nc, func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
}

// stayAway asserts nc does not connect within 2 s and that its log names
// why (want).
func stayAway(t *testing.T, nc *nats.Conn, logs func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if nc.IsConnected() {
			t.Fatalf("connected to %s; log:\n%s", nc.ConnectedUrlRedacted(), logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs(), want) {
		t.Errorf("log does not say %q:\n%s", want, logs())
	}
	if n := strings.Count(logs(), want); n > 1 {
		t.Errorf("%q logged %d times (want once until a connection):\n%s", want, n, logs())
	}
}

// TestTLSEdgePublishes: the edge user with --bus-ca = the server's CA
// connects over TLS (the server's certificate verified), publishes
// telemetry the manager reads back from the stream, and does so again
// after the server restarts (the reconnect verifies again).
func TestTLSEdgePublishes(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Auth: true, TLS: true, Partitions: 4})
	js, _ := srv.Setup(t)
	sink, nc := newSink(t, srv.URL(), 1000, Options{User: bustest.EdgeUser, PasswordFile: srv.PasswordFile(bustest.EdgeUser), CAFile: srv.CAFile()})
	publish := func(from, n int) {
		t.Helper()
		want := sink.Stats().Sent + int64(n)
		for i := range n {
			sink.Add(record(from + i))
		}
		for deadline := time.Now().Add(15 * time.Second); sink.Stats().Sent < want; {
			if time.Now().After(deadline) {
				t.Fatalf("not published: %+v", sink.Stats())
			}
			must(t, sink.Flush(context.Background()))
			time.Sleep(50 * time.Millisecond)
		}
	}
	publish(0, 20)
	st, err := nc.TLSConnectionState()
	if err != nil || !st.HandshakeComplete || st.Version < tls.VersionTLS12 || len(st.VerifiedChains) == 0 {
		t.Fatalf("connection not TLS with a verified chain: %v, %+v", err, st)
	}
	if got := st.VerifiedChains[0][len(st.VerifiedChains[0])-1].Subject.CommonName; got != "bustest CA" {
		t.Errorf("verified up to %q, want the bustest CA", got)
	}
	if n, _ := checkStored(t, readStream(t, js)); n != 20 {
		t.Fatalf("stored %d records, want 20", n)
	}

	srv.Stop()
	for deadline := time.Now().Add(5 * time.Second); nc.IsConnected(); {
		if time.Now().After(deadline) {
			t.Fatal("still connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Restart()
	publish(100, 10)
	if n, _ := checkStored(t, readStream(t, js)); n != 30 {
		t.Fatalf("after the restart: stored %d records, want 30", n)
	}
	if v := srv.Violations(); len(v) > 0 {
		t.Fatalf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// TestTLSLocalhost: the DNS SAN verifies too (nats://localhost:PORT).
func TestTLSLocalhost(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{TLS: true})
	if addrs, err := net.LookupHost("localhost"); err != nil || !contains(addrs, "127.0.0.1") {
		t.Skipf("localhost does not resolve to 127.0.0.1 here: %v %v", addrs, err)
	}
	nc, logs := connectLogged(t, Options{URLs: fmt.Sprintf("nats://localhost:%d", srv.Port), CAFile: srv.CAFile()})
	for deadline := time.Now().Add(5 * time.Second); !nc.IsConnected(); {
		if time.Now().After(deadline) {
			t.Fatalf("not connected to localhost; log:\n%s", logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := nc.TLSConnectionState(); err != nil || st.ServerName != "localhost" {
		t.Fatalf("TLS state: %v, server name %q, want localhost", err, st.ServerName)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestTLSWrongCA: with the CA file of another CA the edge never connects
// (it keeps retrying in the background) and its log says why, once.
func TestTLSWrongCA(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Auth: true, TLS: true})
	nc, logs := connectLogged(t, Options{URLs: srv.URL(), User: bustest.EdgeUser, PasswordFile: srv.PasswordFile(bustest.EdgeUser),
		CAFile: bustest.NewCA(t)})
	stayAway(t, nc, logs, "certificate signed by unknown authority")
	nc.Close()
}

// TestTLSWrongHost: the certificate is verified for the URL's host: the
// same server reached as 127.0.0.2 (not in its IP SANs) is refused.
func TestTLSWrongHost(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{TLS: true})
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 not available: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go forward(ln, fmt.Sprintf("127.0.0.1:%d", srv.Port))
	nc, logs := connectLogged(t, Options{URLs: "nats://" + ln.Addr().String(), CAFile: srv.CAFile()})
	stayAway(t, nc, logs, "certificate is valid for 127.0.0.1, not 127.0.0.2")
}

// forward copies every connection accepted on ln to and from addr until
// ln is closed.
func forward(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			s, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer s.Close()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			_, _ = io.Copy(c, s)
		}()
	}
}

// TestTLSPlainClient: a client without --bus-ca does not connect to the
// TLS server (nats.go upgrades, the system roots do not know its CA), and
// a client that speaks clear text after the server's INFO gets no answer:
// the server requires TLS.
func TestTLSPlainClient(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Auth: true, TLS: true})
	nc, logs := connectLogged(t, Options{URLs: srv.URL(), User: bustest.EdgeUser, PasswordFile: srv.PasswordFile(bustest.EdgeUser)})
	stayAway(t, nc, logs, "certificate signed by unknown authority")

	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", srv.Port), 5*time.Second)
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(c)
	info, err := r.ReadString('\n')
	must(t, err)
	if !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q: want tls_required", info)
	}
	_, err = fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"user\":%q,\"pass\":%q}\r\nPING\r\n", bustest.EdgeUser, srv.EdgePass)
	must(t, err)
	rest, err := io.ReadAll(r) // the server closes (a TLS record it cannot read) or the deadline ends it
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read: %v", err)
	}
	if strings.Contains(string(rest), "PONG") {
		t.Fatalf("the TLS server answered a clear-text client: %q", rest)
	}
}

// TestTLSNoDowngrade: with --bus-ca a server that does not offer TLS is
// refused (the password never goes out in clear text), even on nats://.
func TestTLSNoDowngrade(t *testing.T) {
	srv := bustest.Start(t, true)
	nc, logs := connectLogged(t, Options{URLs: srv.URL(), User: bustest.EdgeUser, PasswordFile: srv.PasswordFile(bustest.EdgeUser),
		CAFile: bustest.NewCA(t)})
	stayAway(t, nc, logs, nats.ErrSecureConnWanted.Error())
}

// TestBusCAFile: --bus-ca that is missing, over 1 MiB, or holds no PEM
// certificate gives one ErrBus naming --bus-ca and the reason, before
// any contact with a server; a file of exactly 1 MiB with a CA is read.
func TestBusCAFile(t *testing.T) {
	dir := t.TempDir()
	ca, err := os.ReadFile(bustest.NewCA(t))
	must(t, err)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, data, 0o600))
		return p
	}
	// a valid CA padded past the bound: refused for its size, not parsed
	pad := func(n int) []byte { return append(append([]byte{}, ca...), []byte(strings.Repeat("#", n-len(ca)))...) }
	big := write("big.pem", pad(maxCABytes+1))
	cases := []struct {
		name, file, want string
	}{
		{"missing", filepath.Join(dir, "none.pem"), "no such file"},
		{"over 1 MiB", big, "larger than 1048576 bytes"},
		{"empty", write("empty.pem", nil), "no PEM certificate"},
		{"not PEM", write("text.pem", []byte("not a certificate\n")), "no PEM certificate"},
		{"a key, no certificate", write("key.pem", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")), "holds a private key"},
		{"a certificate and a key", write("both.pem", append(append([]byte{}, ca...), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")...)), "holds a private key"},
		{"a bad certificate", write("bad.pem", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), "no PEM certificate"},
	}
	for _, c := range cases {
		nc, err := Connect(Options{URLs: "nats://127.0.0.1:1", CAFile: c.file, Log: log.New(io.Discard, "", 0)})
		if nc != nil {
			nc.Close()
		}
		if err == nil || !errors.Is(err, ErrBus) || !strings.Contains(err.Error(), "--bus-ca") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrBus naming --bus-ca and %q", c.name, err, c.want)
		}
	}
	if _, err := ReadCA(write("max.pem", pad(maxCABytes))); err != nil {
		t.Errorf("a CA file of exactly %d bytes: %v", maxCABytes, err)
	}
}
