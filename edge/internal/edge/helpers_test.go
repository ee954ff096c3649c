package edge

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// route sends a prefix (and optionally an SNI) to a one-config group.
type route struct {
	prefix, sni string
	values      map[string]any
	device      string
}

func configID(t testing.TB, values map[string]any) string {
	t.Helper()
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	return reg.ConfigID(values)
}

// tableJSON builds a valid decision table document.
func tableJSON(t testing.TB, version int, def map[string]any, routes ...route) []byte {
	t.Helper()
	configs := map[string]any{configID(t, def): def}
	var groups, rulesDoc []any
	for i, r := range routes {
		id, g := configID(t, r.values), "g"+string(rune('a'+i))
		configs[id] = r.values
		groups = append(groups, map[string]any{"id": g, "choices": []any{map[string]any{"config": id, "p": 1.0}}})
		rule := map[string]any{"prefix": r.prefix, "group": g}
		if r.sni != "" {
			rule["sni"] = r.sni
		}
		if r.device != "" {
			rule["device"] = r.device
		}
		rulesDoc = append(rulesDoc, rule)
	}
	doc := map[string]any{"schema": "tailor.decision-table/v1", "version": version, "generated_at": 1.0,
		"default": configID(t, def), "configs": configs, "groups": orEmpty(groups), "rules": orEmpty(rulesDoc)}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func orEmpty(xs []any) []any {
	if xs == nil {
		return []any{}
	}
	return xs
}

// startServer serves cfg on 127.0.0.1:random with table written to a file;
// everything is closed when the test ends.
func startServer(t *testing.T, cfg Config, table []byte) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	cfg.Root = filepath.Join(dir, "www")
	must(t, os.MkdirAll(cfg.Root, 0o755))
	must(t, os.WriteFile(filepath.Join(cfg.Root, "index.html"), []byte("<html><body>hi</body></html>"), 0o644))
	must(t, os.WriteFile(filepath.Join(cfg.Root, "data.bin"), make([]byte, 100000), 0o644))
	if table != nil {
		cfg.Table = filepath.Join(dir, "table.json")
		must(t, os.WriteFile(cfg.Table, table, 0o644))
	}
	return serveConfig(t, cfg)
}

// serveConfig starts an edge with cfg as given (self-signed, hourly poll) on a loopback port.
func serveConfig(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	cfg.SelfSigned, cfg.Poll = true, time.Hour
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		must(t, s.Close())
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, ln.Addr().String()
}

// get fetches path over a fresh connection with h2 enabled.
func get(t *testing.T, addr, sni, path string) (*http.Response, []byte) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: sni}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return resp, body
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}
