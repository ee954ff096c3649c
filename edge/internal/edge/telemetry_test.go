package edge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// lockedBuffer is a goroutine-safe sink destination.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// schemaProperties reads the record properties allowed by the spec.
func schemaProperties(t *testing.T) map[string]bool {
	b, err := os.ReadFile("../../../spec/telemetry.schema.json")
	if err != nil {
		t.Skipf("spec not reachable: %v", err)
	}
	var s struct {
		Properties struct {
			Records struct {
				Items struct {
					Properties map[string]any `json:"properties"`
				} `json:"items"`
			} `json:"records"`
		} `json:"properties"`
	}
	must(t, json.Unmarshal(b, &s))
	out := map[string]bool{}
	for k := range s.Properties.Records.Items.Properties {
		out[k] = true
	}
	return out
}

// TestTelemetryRecords: responses and beacons produce records that pass
// telemetry validation and use only the schema's properties.
func TestTelemetryRecords(t *testing.T) {
	tuned := map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(50)}
	out := &lockedBuffer{}
	s, addr := startServer(t, Config{Telemetry: "-", TelemetryOut: out, InjectBeacon: true, MaxBeaconBytes: 512}, tableJSON(t, 9, h11, route{prefix: "127.0.0.0/8", values: tuned}))
	_, page := get(t, addr, "site.test", "/")
	if !strings.Contains(string(page), BeaconPath) {
		t.Errorf("beacon snippet not injected: %q", page)
	}
	get(t, addr, "site.test", "/data.bin")
	beacons := []struct {
		body string
		want int
	}{
		{`{"name":"https://site.test/","startTime":0,"loadEventEnd":812.5}`, http.StatusNoContent},
		{`{"startTime":0}`, http.StatusBadRequest},
		{`{"startTime":0,"loadEventEnd":1,"pad":"` + strings.Repeat("x", 600) + `"}`, http.StatusBadRequest}, // over 512 bytes
	}
	for _, b := range beacons {
		if code := postBeacon(t, addr, b.body); code != b.want {
			t.Errorf("beacon %.40s: status %d, want %d", b.body, code, b.want)
		}
	}
	must(t, s.sink.Flush(context.Background()))
	recs := readBatches(t, out.b.Bytes())
	kinds := map[string]int{}
	for _, r := range recs {
		kinds[r.Kind]++
		if r.TableVersion != 9 || r.Group != "ga" || r.ALPN != "h2" || r.SNI != "site.test" || r.TLSFingerprint == "" || r.ClientPrefix != "127.0.0.0/24" {
			t.Errorf("record %+v", r)
		}
	}
	if kinds["response"] != 2 || kinds["pageload"] != 1 {
		t.Errorf("kinds %v, want 2 responses and 1 pageload", kinds)
	}
}

func postBeacon(t *testing.T, addr, body string) int {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "site.test"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post("https://"+addr+BeaconPath, "application/json", strings.NewReader(body))
	must(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func readBatches(t *testing.T, data []byte) []telemetry.Record {
	props := schemaProperties(t)
	var recs []telemetry.Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var b telemetry.Batch
		must(t, json.Unmarshal(sc.Bytes(), &b))
		must(t, b.Validate())
		var raw struct{ Records []map[string]any }
		must(t, json.Unmarshal(sc.Bytes(), &raw))
		for _, r := range raw.Records {
			for k := range r {
				if !props[k] {
					t.Errorf("property %q is not in spec/telemetry.schema.json", k)
				}
			}
		}
		recs = append(recs, b.Records...)
	}
	return recs
}

// TestUnknownClientDefault: no rule covers 127.0.0.1, so no group and the
// default config with probability 1.
func TestUnknownClientDefault(t *testing.T) {
	s, addr := startServer(t, Config{}, tableJSON(t, 1, h11, route{prefix: "10.0.0.0/8", values: h2}))
	got := make(chan *ConnState, 1)
	s.OnDecision = func(_ *Conn, st *ConnState) { got <- st }
	get(t, addr, "localhost", "/")
	st := <-got
	if st.Group != "" || st.Config != configID(t, h11) || st.P != 1 || st.JA3 == "" {
		t.Errorf("decision %+v, want the default config", st.Decision)
	}
}

// TestTableURLPolling: a URL table is fetched with If-None-Match; a 304
// keeps the table, a failing manager keeps the last good one.
func TestTableURLPolling(t *testing.T) {
	var version, notModified atomic.Int64
	version.Store(1)
	var failing atomic.Bool
	mgr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		etag := fmt.Sprintf(`"v%d"`, version.Load())
		switch {
		case failing.Load():
			http.Error(w, "down", http.StatusServiceUnavailable)
		case r.Header.Get("If-None-Match") == etag:
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("ETag", etag)
			_, _ = w.Write(tableJSON(t, int(version.Load()), h11))
		}
	}))
	defer mgr.Close()
	s, _ := startServer(t, Config{Table: mgr.URL}, nil)
	steps := []struct {
		name    string
		bump    bool
		fail    bool
		wantV   int64
		wantErr bool
	}{
		{"unchanged -> 304", false, false, 1, false},
		{"new version", true, false, 2, false},
		{"manager down keeps last good", false, true, 2, true},
	}
	for _, st := range steps {
		if st.bump {
			version.Add(1)
		}
		failing.Store(st.fail)
		err := s.Reload(context.Background())
		if (err != nil) != st.wantErr || s.Plan().Table.Version != st.wantV {
			t.Errorf("%s: err %v version %d, want %d", st.name, err, s.Plan().Table.Version, st.wantV)
		}
	}
	if notModified.Load() != 1 {
		t.Errorf("%d 304 responses, want 1", notModified.Load())
	}
}

// TestReverseProxyWithoutRoot: --upstream alone is a pure reverse proxy.
func TestReverseProxyWithoutRoot(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("upstream " + r.URL.Path))
	}))
	defer up.Close()
	_, addr := serveConfig(t, Config{Upstream: up.URL})
	for _, p := range []string{"/", "/index.html", "/a/b"} {
		if _, body := get(t, addr, "localhost", p); string(body) != "upstream "+p {
			t.Errorf("%s: body %.40q", p, body)
		}
	}
}

// TestReverseProxy: files under Root are served, other paths go upstream.
func TestReverseProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("upstream " + r.URL.Path))
	}))
	defer up.Close()
	_, addr := startServer(t, Config{Upstream: up.URL}, nil)
	cases := []struct{ path, want string }{
		{"/data.bin", ""}, // from Root: 100000 zero bytes
		{"/api/x", "upstream /api/x"},
		{"/", "upstream /"}, // a directory (Root has index.html) is the upstream's
	}
	for _, c := range cases {
		_, body := get(t, addr, "localhost", c.path)
		if c.want != "" && string(body) != c.want || c.want == "" && len(body) != 100000 {
			t.Errorf("%s: body %.40q", c.path, body)
		}
	}
}
