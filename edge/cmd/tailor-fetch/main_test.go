package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/tailor-project/tailor/edge/internal/edge"
	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// startEdge serves a 200 000-byte object with tailor-edge (HTTP/3 on) on
// 127.0.0.1:random. The table gives 127.0.0.1/32 an h2 configuration with
// non-default quic.* knobs; the QUIC decisions are sent to the channel.
func startEdge(t *testing.T) (string, string, chan string) {
	t.Helper()
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]any{}
	tuned := map[string]any{"http.version": "2", "quic.initial_stream_receive_window": int64(65536),
		"quic.max_incoming_streams": int64(7), "quic.initial_packet_size": int64(1350)}
	tunedID := reg.ConfigID(tuned)
	table, _ := json.Marshal(map[string]any{"schema": "tailor.decision-table/v1", "version": 1, "generated_at": 1.0,
		"default": reg.ConfigID(def), "configs": map[string]any{reg.ConfigID(def): def, tunedID: tuned},
		"groups": []any{map[string]any{"id": "lo", "choices": []any{map[string]any{"config": tunedID, "p": 1.0}}}},
		"rules":  []any{map[string]any{"prefix": "127.0.0.1/32", "group": "lo"}}})
	addr, decided := serveEdge(t, table, bytes.Repeat([]byte("0123456789"), 20000), true)
	return addr, tunedID, decided
}

// serveEdge serves body as obj.bin with tailor-edge (HTTP/3 on) on
// 127.0.0.1:random under table; the QUIC decisions are sent to the channel.
func serveEdge(t *testing.T, table, body []byte, applySocket bool) (string, chan string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "www")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "obj.bin"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	tablePath := filepath.Join(dir, "table.json")
	if err := os.WriteFile(tablePath, table, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := edge.New(edge.Config{Root: root, SelfSigned: true, Table: tablePath, Poll: time.Hour, QUIC: true,
		ApplySocket: applySocket})
	if err != nil {
		t.Fatal(err)
	}
	decided := make(chan string, 16)
	s.SetOnQUICDecision(func(_ *quic.Conn, st *edge.ConnState) { decided <- st.Config })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), decided
}

func runFetch(t *testing.T, args ...string) (Result, int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	var r Result
	if code != 2 {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("want one JSON line, got %q", out.String())
		}
		if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
			t.Fatalf("not JSON: %q: %v", lines[0], err)
		}
	}
	return r, code, errb.String()
}

func TestFetchEachProtocol(t *testing.T) {
	addr, tunedID, decided := startEdge(t)
	_, port, _ := net.SplitHostPort(addr)
	url := "https://localhost:" + port + "/obj.bin"
	for _, c := range []struct{ http, proto string }{{"3", "h3"}, {"2", "h2"}, {"1.1", "http/1.1"}} {
		r, code, stderr := runFetch(t, "--http", c.http, "--insecure", "--resolve", "localhost:127.0.0.1",
			"--timeout", "10s", url)
		if code != 0 || r.Error != "" {
			t.Fatalf("--http %s: exit %d, error %q, stderr %q", c.http, code, r.Error, stderr)
		}
		if r.Protocol != c.proto || r.Status != 200 || r.Bytes != 200000 {
			t.Errorf("--http %s: protocol %q status %d bytes %d, want %s 200 200000", c.http, r.Protocol, r.Status,
				r.Bytes, c.proto)
		}
		if !(0 < r.ConnectMs && r.ConnectMs <= r.HandshakeMs && r.HandshakeMs <= r.TTFBMs && r.TTFBMs <= r.TotalMs) {
			t.Errorf("--http %s: times not ordered 0 < connect %.3f <= handshake %.3f <= ttfb %.3f <= total %.3f",
				c.http, r.ConnectMs, r.HandshakeMs, r.TTFBMs, r.TotalMs)
		}
		t.Logf("--http %-3s %-8s connect %.2f handshake %.2f ttfb %.2f total %.2f ms", c.http, r.Protocol,
			r.ConnectMs, r.HandshakeMs, r.TTFBMs, r.TotalMs)
		if c.http == "3" {
			select {
			case id := <-decided:
				if id != tunedID {
					t.Errorf("QUIC connection got config %s, want the table's %s for 127.0.0.1/32", id, tunedID)
				}
			case <-time.After(5 * time.Second):
				t.Error("no QUIC decision recorded")
			}
		}
	}
	// Certificate verification is on without --insecure: the self-signed certificate is refused.
	r, code, _ := runFetch(t, "--resolve", "localhost:127.0.0.1", "--timeout", "5s", url)
	if code != 1 || !strings.Contains(r.Error, "certificate") {
		t.Errorf("without --insecure: exit %d error %q, want 1 and a certificate error", code, r.Error)
	}
	// A missing object is a failed fetch (exit 1) with the status.
	r, code, _ = runFetch(t, "--insecure", "--http", "2", "--resolve", "localhost:127.0.0.1",
		"https://localhost:"+port+"/missing.bin")
	if code != 1 || r.Status != 404 || !strings.Contains(r.Error, "404") {
		t.Errorf("missing object: exit %d status %d error %q, want 1, 404", code, r.Status, r.Error)
	}
	// Nothing listens: bounded by --timeout, exit 1.
	begin := time.Now()
	r, code, _ = runFetch(t, "--insecure", "--timeout", "1s", "https://127.0.0.1:9/x")
	if code != 1 || r.Error == "" || time.Since(begin) > 5*time.Second {
		t.Errorf("closed port: exit %d error %q after %v, want 1 within the timeout", code, r.Error, time.Since(begin))
	}
}

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "4", "https://a/"}, "--http"},
		{[]string{"--timeout", "0s", "https://a/"}, "--timeout"},
		{[]string{"--timeout", "soon", "https://a/"}, "-timeout"},
		{[]string{"--resolve", "a", "https://a/"}, "--resolve"},
		{[]string{"--resolve", "a:notanip", "https://a/"}, "--resolve"},
		{[]string{"--local-addr", "here", "https://a/"}, "--local-addr"},
		{[]string{"--nope", "https://a/"}, "-nope"},
		{[]string{}, "URL"},
		{[]string{"https://a/", "https://b/"}, "URL"},
		{[]string{"http://a/"}, "https://"},
	} {
		_, code, stderr := runFetch(t, c.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tailor-fetch: error: ") ||
			!strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d stderr %q, want 2 and one line naming %s", c.args, code, stderr, c.want)
		}
	}
}
