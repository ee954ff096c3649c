package edge

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/metrics"
)

// fetch GETs path over a fresh connection: h2 offered or HTTP/1.1 only.
func fetch(t *testing.T, addr, path string, h2 bool) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "site.test"}, ForceAttemptHTTP2: h2, DisableKeepAlives: true}
	if !h2 { // offer only http/1.1 (Go's client would otherwise send no ALPN at all)
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + path)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestMetricsMatchRequests: a bounded load over fresh connections, then
// /metrics scraped over HTTP: decisions, holdback, ALPN, device, the RTT
// histogram and the telemetry counters equal what was sent, as the
// telemetry records (an independent account) say.
func TestMetricsMatchRequests(t *testing.T) {
	const perProto = 20
	tuned := map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(50)}
	table := withDecisionFields(t, tableJSON(t, 9, h11, route{prefix: "127.0.0.0/8", values: tuned}), 0.5, "")
	out := &lockedBuffer{}
	s, addr := startServer(t, Config{Metrics: "127.0.0.1:0", Telemetry: "-", TelemetryOut: out}, table)
	for i := range 2 * perProto {
		fetch(t, addr, "/data.bin", i%2 == 0)
	}
	must(t, s.sink.Flush(context.Background()))
	recs := readBatches(t, out.b.Bytes())
	if len(recs) != 2*perProto {
		t.Fatalf("%d records, want %d", len(recs), 2*perProto)
	}
	held, byConfig, byALPN := 0, map[string]int{}, map[string]int{}
	for _, r := range recs {
		if *r.Holdback {
			held++
		}
		byConfig[r.ConfigID]++
		byALPN[r.ALPN]++
	}
	m, err := metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
	must(t, err)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tailor_edge_decisions_total", nil, 2 * perProto},
		{"tailor_edge_decisions_total", []string{"group", "ga", "config", configID(t, tuned)}, float64(byConfig[configID(t, tuned)])},
		{"tailor_edge_decisions_total", []string{"group", "ga", "config", configID(t, h11)}, float64(byConfig[configID(t, h11)])},
		{"tailor_edge_holdback_connections_total", []string{"proto", "tcp"}, float64(held)},
		{"tailor_edge_handshakes_total", []string{"alpn", "h2"}, float64(byALPN["h2"])},
		{"tailor_edge_handshakes_total", []string{"alpn", "http/1.1"}, float64(byALPN["http/1.1"])},
		{"tailor_edge_handshakes_total", []string{"alpn", "none"}, 0},
		{"tailor_edge_connections_by_device_total", []string{"proto", "tcp", "device", "unknown"}, 2 * perProto},
		{"tailor_edge_handshake_rtt_seconds_count", []string{"proto", "tcp"}, 2 * perProto},
		{"tailor_edge_telemetry_records_sent_total", nil, 2 * perProto},
		{"tailor_edge_telemetry_records_dropped_total", nil, 0},
		{"tailor_edge_telemetry_bus_full_total", nil, 0},
		{"tailor_edge_telemetry_bus_unavailable_total", nil, 0},
		{"tailor_edge_table_version", nil, 9},
		{"tailor_edge_table_loads_total", nil, 1},
		{"tailor_edge_table_rejections_total", nil, 0},
		{"tailor_edge_decisions_overflow_total", nil, 0},
	}
	for _, c := range checks {
		if got := m.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if held == 0 || held == 2*perProto {
		t.Logf("holdback 0.5 held back %d of %d connections", held, 2*perProto)
	}
	// generated_at 1.0: the age is the table's, not the process's
	if age := m.Value("tailor_edge_table_age_seconds"); age < float64(time.Now().Unix())-10 {
		t.Errorf("table age %v s, want now - generated_at", age)
	}
	// a refused table is counted and the version stays
	if err := s.LoadTable([]byte(`{"schema": "nope"}`)); err == nil {
		t.Fatal("bad table accepted")
	}
	m, err = metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
	must(t, err)
	if got := m.Value("tailor_edge_table_rejections_total"); got != 1 {
		t.Errorf("rejections %v, want 1", got)
	}
	// a lower version is installed, and counted (until 2026-12-07 silently; found by review)
	if got := m.Value("tailor_edge_table_version_regressions_total"); got != 0 {
		t.Errorf("regressions %v before any, want 0", got)
	}
	must(t, s.LoadTable(tableJSON(t, 3, h11)))
	m, err = metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
	must(t, err)
	if m.Value("tailor_edge_table_version") != 3 || m.Value("tailor_edge_table_version_regressions_total") != 1 {
		t.Errorf("version %v, regressions %v; want 3, 1", m.Value("tailor_edge_table_version"),
			m.Value("tailor_edge_table_version_regressions_total"))
	}
}

// TestMetricsApplyErrors: real setsockopt failures (a closed descriptor)
// are counted by knob and errno.
func TestMetricsApplyErrors(t *testing.T) {
	s, _ := startServer(t, Config{Metrics: "127.0.0.1:0"}, nil)
	s.socketDone(SocketOpts{Congestion: "cubic", SndBuf: 65536, NoDelay: true}.setAll(-1, false))
	m, err := metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
	must(t, err)
	for _, knob := range []string{"tcp.congestion_control", "tcp.sndbuf_bytes", "tcp.nodelay"} {
		if got := m.Value("tailor_edge_apply_errors_total", "knob", knob, "kind", "EBADF"); got != 1 {
			t.Errorf("apply errors %s EBADF = %v, want 1", knob, got)
		}
	}
	if got := m.Value("tailor_edge_apply_errors_total"); got != 3 {
		t.Errorf("apply errors %v, want 3", got)
	}
}

// TestMetricsOff: without --metrics nothing listens.
func TestMetricsOff(t *testing.T) {
	s, _ := startServer(t, Config{}, nil)
	if s.MetricsAddr() != "" || s.metrics != nil {
		t.Errorf("metrics on without --metrics: %q", s.MetricsAddr())
	}
}
