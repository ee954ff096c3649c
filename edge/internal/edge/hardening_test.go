package edge

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

// TestHostileSNIIsIgnored: a 60 KB SNI, and one with a character outside
// [A-Za-z0-9._-], are treated as absent: no rule keyed on the name
// matches, the records carry no sni, the counter goes up, and the edge
// keeps serving.
func TestHostileSNIIsIgnored(t *testing.T) {
	out := &lockedBuffer{}
	long := strings.Repeat("a", 60000) + ".example"
	s, addr := startServer(t, Config{Telemetry: "-", TelemetryOut: out},
		tableJSON(t, 3, h11, route{prefix: "127.0.0.0/8", sni: "site.test", values: h2}))
	decisions := make(chan *ConnState, 4)
	s.OnDecision = func(_ *Conn, st *ConnState) { decisions <- st }

	hostile := []string{long, "bad name", "x\x00y"}
	for _, name := range hostile {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: name})
		if err != nil {
			t.Fatalf("handshake with a %d-byte SNI: %v", len(name), err)
		}
		_ = c.Close()
		st := <-decisions
		if st.SNI != "" || st.Group != "" {
			t.Errorf("%d-byte SNI: state SNI %.20q group %q, want no SNI and the default", len(name), st.SNI, st.Group)
		}
	}
	if got := s.Sanitized.SNI.Load(); got != int64(len(hostile)) {
		t.Errorf("Sanitized.SNI = %d, want %d", got, len(hostile))
	}
	// with a long name that also breaks the pattern: the record has no sni
	resp, _ := get(t, addr, long+"!", "/")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	<-decisions
	resp, _ = get(t, addr, "site.test", "/") // still serving, the SNI rule still applies
	if st := <-decisions; resp.ProtoMajor != 2 || st.SNI != "site.test" || st.Group != "ga" {
		t.Errorf("after hostile SNIs: proto %d state %+v", resp.ProtoMajor, st)
	}
	must(t, s.sink.Flush(context.Background()))
	recs := readBatches(t, out.b.Bytes())
	if len(recs) < 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, r := range recs {
		if r.SNI != "" && r.SNI != "site.test" {
			t.Errorf("record carries sni %.40q", r.SNI)
		}
	}
}

// TestSlowReadersAreCut: 100 clients that request a large file and never
// read are disconnected once a write makes no progress for WriteTimeout
// (1 s here), instead of holding their connection and buffers.
func TestSlowReadersAreCut(t *testing.T) {
	s, addr := startServer(t, Config{WriteTimeout: time.Second}, nil)
	const size = 4 << 20
	must(t, os.WriteFile(filepath.Join(s.cfg.Root, "big.bin"), make([]byte, size), 0o644))
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	const n = 100
	conns := make([]*tls.Conn, 0, n)
	var raws []*net.TCPConn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	start := time.Now()
	for range n {
		raw, err := d.Dial("tcp", addr)
		must(t, err)
		raws = append(raws, raw.(*net.TCPConn))
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		conns = append(conns, c)
		_, err = c.Write([]byte("GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"))
		must(t, err)
	}
	t.Logf("%d requests sent after %v", n, time.Since(start))
	time.Sleep(3 * time.Second) // stalled: never read
	errs := make(chan error, n)
	for i, c := range conns { // drain what the kernel buffered: EOF comes at once if the server cut the connection
		go func() {
			_ = raws[i].SetReadBuffer(8 << 20) // drain fast
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.Copy(io.Discard, c)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				errs <- fmt.Errorf("conn %d still open after %v (read %d bytes)", i, time.Since(start), got)
			case got >= size:
				errs <- fmt.Errorf("conn %d got the whole file: not cut", i)
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("took %v", el)
	}
	t.Logf("all %d cut and drained after %v", n, time.Since(start))
	// a reader that keeps up still gets the whole file
	resp, body := get(t, addr, "localhost", "/big.bin")
	if resp.StatusCode != 200 || len(body) != size {
		t.Errorf("normal download: %d, %d bytes", resp.StatusCode, len(body))
	}
}

// TestHangingUpstreamGives504: an upstream that never answers gives 504
// after UpstreamTimeout.
func TestHangingUpstreamGives504(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hangs until the edge gives up
	}))
	defer up.Close()
	_, addr := startServer(t, Config{Upstream: up.URL, UpstreamTimeout: 300 * time.Millisecond}, nil)
	start := time.Now()
	resp, _ := get(t, addr, "localhost", "/api/slow")
	if el := time.Since(start); resp.StatusCode != http.StatusGatewayTimeout || el > 3*time.Second {
		t.Fatalf("status %d after %v, want 504 after ~300ms", resp.StatusCode, el)
	}
	// an unreachable upstream is a 502, not a hang
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	_, addr2 := startServer(t, Config{Upstream: deadURL, UpstreamTimeout: 300 * time.Millisecond}, nil)
	if resp, _ := get(t, addr2, "localhost", "/api/x"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("dead upstream: status %d, want 502", resp.StatusCode)
	}
}

// TestStaticRootConfinement: dot paths are never served, a symlink out of
// the root is not followed, a symlink inside the root is.
func TestStaticRootConfinement(t *testing.T) {
	s, addr := startServer(t, Config{}, nil)
	root := s.cfg.Root
	outside := filepath.Join(t.TempDir(), "secret.txt")
	must(t, os.WriteFile(outside, []byte("secret"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, ".env"), []byte("TOKEN=x"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, ".git", "config"), []byte("[core]"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", ".hidden"), []byte("h"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "sub", "ok.txt"), []byte("ok"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(root, "escape.txt")))
	must(t, os.Symlink(filepath.Dir(outside), filepath.Join(root, "escapedir")))
	must(t, os.Symlink("index.html", filepath.Join(root, "inner.html")))
	cases := []struct {
		path string
		code int
	}{
		{"/.env", 404}, {"/.git/config", 404}, {"/sub/.hidden", 404}, {"/%2eenv", 404}, {"/sub/%2ehidden", 404},
		{"/escape.txt", 404}, {"/escapedir/secret.txt", 404},
		{"/inner.html", 200}, {"/sub/ok.txt", 200}, {"/", 200},
	}
	for _, c := range cases {
		resp, body := get(t, addr, "localhost", c.path)
		if resp.StatusCode != c.code || strings.Contains(string(body), "secret") || strings.Contains(string(body), "TOKEN") {
			t.Errorf("%s: status %d body %.30q, want %d", c.path, resp.StatusCode, body, c.code)
		}
	}
	if _, body := get(t, addr, "localhost", "/sub/"); strings.Contains(string(body), ".hidden") || !strings.Contains(string(body), "ok.txt") {
		t.Errorf("listing of /sub/: %q", body)
	}
}

// TestSignedTableFromManager: over https with a private CA (--manager-ca)
// and a bearer token, signed tables apply; an unsigned and an invalid
// (signed) table are refused once each, not downloaded again, and the last
// good table stays; telemetry goes to the same manager through the same CA.
func TestSignedTableFromManager(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	der, err := x509.MarshalPKIXPublicKey(pub)
	must(t, err)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.pem")
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))

	var mu sync.Mutex
	var body []byte
	var signed bool
	oks, telemetryPosts, badAuth := 0, 0, 0
	mgr := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" {
			badAuth++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			telemetryPosts++
			w.WriteHeader(http.StatusAccepted)
			return
		}
		sum := sha256.Sum256(body)
		etag := `"` + hex.EncodeToString(sum[:8]) + `"`
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if signed {
			w.Header().Set(rules.SignatureHeader, base64.StdEncoding.EncodeToString(ed25519.Sign(priv, body)))
			w.Header().Set(rules.KeyIDHeader, rules.KeyID(pub))
		}
		oks++
		_, _ = w.Write(body)
	}))
	defer mgr.Close()
	ca := filepath.Join(dir, "ca.pem")
	must(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mgr.Certificate().Raw}), 0o644))
	serve := func(b []byte, sig bool) int {
		mu.Lock()
		defer mu.Unlock()
		body, signed = b, sig
		return oks
	}
	downloads := func() int { mu.Lock(); defer mu.Unlock(); return oks }

	serve(tableJSON(t, 1, h11), true)
	s, addr := startServer(t, Config{Table: mgr.URL, TablePubKey: keyFile, ManagerCA: ca, Token: "tok", Telemetry: mgr.URL}, nil)
	if v := s.Plan().Table.Version; v != 1 {
		t.Fatalf("version %d", v)
	}
	ctx := context.Background()
	steps := []struct {
		name   string
		table  []byte
		signed bool
		wantV  int64
		refuse bool
	}{
		{"unsigned", tableJSON(t, 2, h11), false, 1, true},
		{"invalid but signed", []byte(`{"schema": "tailor.decision-table/v1"}`), true, 1, true},
		{"signed v3", tableJSON(t, 3, h11), true, 3, false},
	}
	for _, st := range steps {
		before := serve(st.table, st.signed)
		err := s.Reload(ctx)
		if (err != nil) != st.refuse || s.Plan().Table.Version != st.wantV {
			t.Errorf("%s: err %v, version %d, want %d", st.name, err, s.Plan().Table.Version, st.wantV)
		}
		for range 2 {
			if err := s.Reload(ctx); err != nil {
				t.Errorf("%s: reported again: %v", st.name, err)
			}
		}
		if got := downloads() - before; got != 1 {
			t.Errorf("%s: downloaded %d times, want 1", st.name, got)
		}
	}
	if got := s.TablesRefused(); got != 2 || s.Stats().TablesRefused != 2 || s.Stats().TableVersion != 3 {
		t.Errorf("refused %d, stats %v", got, s.Stats())
	}
	get(t, addr, "localhost", "/")
	must(t, s.sink.Flush(ctx))
	mu.Lock()
	defer mu.Unlock()
	if telemetryPosts != 1 || badAuth != 0 {
		t.Errorf("telemetry posts %d, requests without the token %d", telemetryPosts, badAuth)
	}
}
