package agent_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/metrics"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestAgentMetricsMatchConnections: the real agent tunes a bounded number
// of connections from three prefixes in namespaces; /metrics, scraped over
// HTTP, counts exactly those connections in the program's counters, by
// group and configuration, by address family, and in the telemetry sink.
func TestAgentMetricsMatchConnections(t *testing.T) {
	privileged(t)
	const perClient = 5
	before := cgroupCount(t)
	table := filepath.Join(t.TempDir(), "table.json")
	writeTable(t, table, 1, tableV1)
	var cgroup string
	t.Cleanup(func() { assertClean(t, cgroup, before) })
	tb := newTestbed(t)
	a, err := agent.Open(agent.Config{Table: table, Poll: time.Hour, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cgroup = a.CgroupPath()
	ms, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	sink := telemetry.NewLineSink(&syncBuffer{}, "agent-metrics-test")
	a.RegisterMetrics(ms.Registry, sink)
	stop, err := a.Start(context.Background(), sink)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := reports(startServer(t, a, tb.srv, []string{serverEnv + "=" + tb.serverAddr + ":8080"}, os.Args[0], "-test.run=^$"))
	waitListen(t, tb.srv, "8080")
	for i := range tb.clients {
		for range perClient {
			c := tb.dial(t, tb.clients[i], tb.serverAddr+":8080")
			next(t, srv, "accept")
			if _, err := io.Copy(io.Discard, c); err != nil { // the server sends 64 KiB and half-closes
				t.Fatal(err)
			}
			c.Close()
			next(t, srv, "close")
		}
	}
	total := float64(perClient * len(tb.clients))
	url := "http://" + ms.Addr() + metrics.Path
	waitFor(t, "telemetry records shipped", func() bool {
		m, err := metrics.Scrape(url)
		return err == nil && m.Value("tailor_agent_telemetry_records_sent_total") >= total
	})
	m, err := metrics.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := knobs.Default()
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tailor_agent_connections_tuned_total", nil, total},
		{"tailor_agent_connections_default_total", nil, 0},
		{"tailor_agent_holdback_connections_total", nil, 0},
		{"tailor_agent_events_total", nil, total},
		{"tailor_agent_events_received_total", nil, total},
		{"tailor_agent_events_lost_total", nil, 0},
		{"tailor_agent_decisions_total", nil, total},
		{"tailor_agent_decisions_total", []string{"group", "g1", "config", reg.ConfigID(tableV1[1])}, perClient},
		{"tailor_agent_decisions_total", []string{"group", "g2", "config", reg.ConfigID(tableV1[2])}, perClient},
		{"tailor_agent_decisions_total", []string{"group", "g3", "config", reg.ConfigID(tableV1[3])}, perClient},
		{"tailor_agent_connections_closed_total", []string{"family", "ipv4"}, total},
		{"tailor_agent_connection_min_rtt_seconds_count", nil, total},
		{"tailor_agent_telemetry_records_sent_total", nil, total},
		{"tailor_agent_telemetry_records_dropped_total", nil, 0},
		{"tailor_agent_telemetry_bus_full_total", nil, 0},
		{"tailor_agent_telemetry_bus_unavailable_total", nil, 0},
		{"tailor_agent_apply_errors_total", nil, 0},
		{"tailor_agent_table_version", nil, 1},
		{"tailor_agent_table_loads_total", nil, 1},
		{"tailor_agent_table_rejections_total", nil, 0},
	}
	for _, c := range checks {
		if got := m.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
