package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// BenchmarkTablePropagation: table propagation latency from publication
// (the manager's KV put) to applied (signature verified, table parsed and
// installed: the Tables watcher's OnChange) at TAILOR_BENCH_EDGES simulated
// edges (default 100), each with its own connection as the edge user of an
// authenticated nats-server with file storage, for TAILOR_BENCH_VERSIONS
// versions (default 50) published 200 ms apart. Run by bench/bus/run.sh;
// TAILOR_BENCH_OUT names a JSON file for the figures.
func BenchmarkTablePropagation(b *testing.B) {
	edges, versions := envInt("TAILOR_BENCH_EDGES", 100), envInt("TAILOR_BENCH_VERSIONS", 50)
	srv := bustest.Start(b, true)
	_, kv := srv.Setup(b)
	key := bustest.NewKey(b)
	keys, err := rules.LoadTableKeys(key.PubFile)
	if err != nil {
		b.Fatal(err)
	}
	reg, err := knobs.Default()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := kv.Put(ctx, "cluster", bustest.Cluster(6)); err != nil {
		b.Fatal(err)
	}
	iw32 := map[string]any{"tcp.initial_cwnd": 32}
	var mu sync.Mutex
	applied := make(map[int64][]time.Time) // version -> when each edge applied it
	ready := make(chan struct{}, edges)
	var wg sync.WaitGroup
	pw := srv.PasswordFile("edge")
	for i := 0; i < edges; i++ {
		nc, err := Connect(Options{URLs: srv.URL(), User: "edge", PasswordFile: pw,
			Name: fmt.Sprintf("bench-edge-%d", i), Log: log.New(io.Discard, "", 0)})
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		t := &Tables{Keys: keys, Reg: reg, Log: log.New(io.Discard, "", 0)}
		var seen int64
		t.OnChange(func(s Snapshot) {
			tab := s.Tables[0]
			if tab == nil || tab.Version <= seen {
				return
			}
			seen = tab.Version
			now := time.Now()
			mu.Lock()
			applied[tab.Version] = append(applied[tab.Version], now)
			mu.Unlock()
			if tab.Version == 1 {
				ready <- struct{}{}
			}
		})
		wg.Add(1)
		go func(nc *nats.Conn) { defer wg.Done(); t.Watch(ctx, nc) }(nc)
	}
	if _, err := kv.Put(ctx, "part.0", key.Envelope(b, 0, bustest.Table(b, 1, "10.0.0.0/24", iw32))); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < edges; i++ { // every watcher is up and has version 1
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			b.Fatalf("only %d of %d edges applied version 1 within 60 s", i, edges)
		}
	}
	published := make(map[int64]time.Time)
	b.ResetTimer()
	for v := int64(2); v < int64(versions)+2; v++ {
		env := key.Envelope(b, 0, bustest.Table(b, int(v), "10.0.0.0/24", iw32))
		published[v] = time.Now()
		if _, err := kv.Put(ctx, "part.0", env); err != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(applied[int64(versions)+1])
		mu.Unlock()
		if n == edges {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	var lat []float64
	missing := 0
	mu.Lock()
	for v, at := range published {
		got := applied[v]
		missing += edges - len(got)
		for _, t := range got {
			lat = append(lat, float64(t.Sub(at).Microseconds())/1000)
		}
	}
	mu.Unlock()
	cancel()
	wg.Wait()
	sort.Float64s(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return -1
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	out := map[string]any{"edges": edges, "versions": versions, "applied": len(lat), "not_applied": missing,
		"p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "max_ms": q(1.0 - 1e-12),
		"server": "nats-server file storage, authenticated edge user, loopback", "gap_ms": 200}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(missing), "not-applied")
	if path := os.Getenv("TAILOR_BENCH_OUT"); path != "" {
		data, _ := json.MarshalIndent(out, "", " ")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err != nil || v <= 0 {
		return def
	}
	return v
}
