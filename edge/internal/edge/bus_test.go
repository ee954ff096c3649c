package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
	"github.com/tailor-project/tailor/edge/internal/metrics"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureLog sends the standard logger (the edge's default) to a buffer
// for the test.
func captureLog(t *testing.T) *syncBuffer {
	buf := &syncBuffer{}
	old := log.Writer()
	log.SetOutput(buf)
	t.Cleanup(func() { log.SetOutput(old) })
	return buf
}

// protoOf is the HTTP version a fresh connection gets (1 or 2).
func protoOf(t *testing.T, addr string) int {
	resp, _ := get(t, addr, "", "/index.html")
	return resp.ProtoMajor
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBusTablesPerPartition: a connection is decided by its client
// partition's table (the built-in default when that partition has none),
// its telemetry reports that table's version and goes to the partition's
// subject; the cache then lets an edge start without the bus.
func TestBusTablesPerPartition(t *testing.T) {
	logs := captureLog(t)
	srv := bustest.Start(t, false)
	js, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	const P = 4
	mine := bus.Partition("127.0.0.0/24", P)
	other := (mine + 1) % P
	cache := filepath.Join(t.TempDir(), "cache")
	cfg := Config{Bus: srv.URL(), TablePubKey: k.PubFile, TableCache: cache, Pop: "fra-1", ConnRecords: true, Flush: 100 * time.Millisecond,
		Metrics: "127.0.0.1:0"}
	s, addr := startServer(t, cfg, nil)
	source := func(s *Server) string {
		t.Helper()
		sc, err := metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
		must(t, err)
		var on []string
		for _, src := range []string{bus.SourceNone, bus.SourceCache, bus.SourceBus} {
			if sc.Value("tailor_table_source", "source", src) == 1 {
				on = append(on, src)
			}
		}
		return strings.Join(on, ",")
	}
	if got := source(s); got != "none" {
		t.Errorf("tailor_table_source at start: %q, want none", got)
	}
	if got := protoOf(t, addr); got != 1 {
		t.Fatalf("before any table: HTTP/%d, want the default HTTP/1.1", got)
	}
	put := func(key string, v []byte) {
		t.Helper()
		if _, err := kv.Put(context.Background(), key, v); err != nil {
			t.Fatal(err)
		}
	}
	put("cluster", bustest.Cluster(P))
	// another partition's table routes 127/24 to h2: not ours, not applied
	put(fmt.Sprintf("part.%d", other), k.Envelope(t, other, bustest.Table(t, 3, "127.0.0.0/24", h2)))
	waitUntil(t, "the other partition's table", func() bool { return s.BusTables().Applied() == 1 })
	if got := protoOf(t, addr); got != 1 {
		t.Fatalf("with a table for another partition: HTTP/%d, want HTTP/1.1", got)
	}
	put(fmt.Sprintf("part.%d", mine), k.Envelope(t, mine, bustest.Table(t, 11, "127.0.0.0/24", h2)))
	waitUntil(t, "our partition's table", func() bool { return s.BusTables().Applied() == 2 })
	if got := protoOf(t, addr); got != 2 {
		t.Fatalf("with our partition's table: HTTP/%d, want HTTP/2", got)
	}
	if got := source(s); got != "bus" || s.TableSource() != bus.SourceBus {
		t.Errorf("tailor_table_source %q, TableSource %q; want bus", got, s.TableSource())
	}
	// a badly signed envelope for our partition: refused, last good kept
	put(fmt.Sprintf("part.%d", mine), bustest.NewKey(t).Envelope(t, mine, bustest.Table(t, 12, "", nil)))
	waitUntil(t, "the refusal", func() bool { return s.TablesRefused() == 1 })
	if got := protoOf(t, addr); got != 2 {
		t.Fatalf("after a refused envelope: HTTP/%d, want HTTP/2 (last good)", got)
	}

	// telemetry: on tailor.tel.fra-1.<mine>, table_version 11 for the h2 responses
	subj := fmt.Sprintf("tailor.tel.fra-1.%d", mine)
	var recs []telemetry.Record
	waitUntil(t, "telemetry on "+subj, func() bool {
		recs = streamRecords(t, js)
		for _, r := range recs {
			if r.TableVersion == 11 && r.ALPN == "h2" {
				return true
			}
		}
		return false
	})
	for _, r := range recs {
		if r.ClientPrefix != "127.0.0.0/24" || (r.TableVersion != 0 && r.TableVersion != 11) {
			t.Errorf("record %s table_version %d", r.ClientPrefix, r.TableVersion)
		}
		if r.ALPN == "h2" && r.TableVersion != 11 {
			t.Errorf("h2 record with table_version %d", r.TableVersion)
		}
	}

	// an edge started with the bus unreachable serves from the cache
	srv.Stop()
	s2, addr2 := startServer(t, Config{Bus: fmt.Sprintf("nats://127.0.0.1:%d", bustest.FreePort(t)), TablePubKey: k.PubFile, TableCache: cache,
		Metrics: "127.0.0.1:0"}, nil)
	if got := source(s2); got != "cache" {
		t.Errorf("tailor_table_source from the cache: %q", got)
	}
	if got := protoOf(t, addr2); got != 2 {
		t.Fatalf("from the cache: HTTP/%d, want HTTP/2", got)
	}
	if s2.TableSource() != bus.SourceCache || !strings.Contains(logs.String(), "tables from cache") {
		t.Errorf("source %q; log:\n%s", s2.TableSource(), logs.String())
	}
}

// streamRecords reads every record stored in the telemetry stream, and
// checks each message's subject against its records' partition (P=4).
func streamRecords(t *testing.T, js jetstream.JetStream) []telemetry.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "TAILOR_TELEMETRY")
	must(t, err)
	n := st.CachedInfo().State.Msgs
	c, err := js.OrderedConsumer(ctx, "TAILOR_TELEMETRY", jetstream.OrderedConsumerConfig{})
	must(t, err)
	var recs []telemetry.Record
	for range n {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		must(t, err)
		var b telemetry.Batch
		must(t, json.Unmarshal(m.Data(), &b))
		for _, r := range b.Records {
			if want := fmt.Sprintf("tailor.tel.fra-1.%d", bus.Partition(r.ClientPrefix, 4)); m.Subject() != want {
				t.Errorf("%s on %s, want %s", r.ClientPrefix, m.Subject(), want)
			}
		}
		recs = append(recs, b.Records...)
	}
	return recs
}

// TestHTTPTableManagerDown: with --table URL and the manager down at
// start, the edge starts (the cached table, else the built-in default)
// and keeps polling.
func TestHTTPTableManagerDown(t *testing.T) {
	logs := captureLog(t)
	table := tableJSON(t, 9, h11, route{prefix: "127.0.0.0/24", values: h2})
	var mu sync.Mutex
	up := true
	mgr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(table)
	}))
	defer mgr.Close()
	// no manager, no cache: the built-in default
	s, addr := serveConfig(t, Config{Root: t.TempDir(), Table: "http://127.0.0.1:1/v1/table"})
	if v := s.Plan().Table.Version; v != 0 || protoOf(t, addr) != 1 {
		t.Fatalf("manager down: version %d", v)
	}
	if !strings.Contains(logs.String(), "serving the built-in default table until") {
		t.Errorf("log:\n%s", logs.String())
	}
	// a manager up writes the cache; then down: the cache serves
	cache := t.TempDir()
	s1, _ := serveConfig(t, Config{Root: t.TempDir(), Table: mgr.URL + "/v1/table", TableCache: cache})
	if v := s1.Plan().Table.Version; v != 9 {
		t.Fatalf("manager up: version %d", v)
	}
	mu.Lock()
	up = false
	mu.Unlock()
	s2, addr2 := serveConfig(t, Config{Root: t.TempDir(), Table: mgr.URL + "/v1/table", TableCache: cache})
	if v := s2.Plan().Table.Version; v != 9 || protoOf(t, addr2) != 2 {
		t.Fatalf("from the cache: version %d", v)
	}
	// a tampered cache is not used
	must(t, os.WriteFile(filepath.Join(cache, httpCacheFile), []byte(`{"schema":"x"}`), 0o600))
	s3, _ := serveConfig(t, Config{Root: t.TempDir(), Table: mgr.URL + "/v1/table", TableCache: cache})
	if v := s3.Plan().Table.Version; v != 0 {
		t.Fatalf("bad cache: version %d", v)
	}
}
