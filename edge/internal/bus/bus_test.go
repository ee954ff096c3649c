package bus

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

func TestPartitionVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "spec", "vectors", "bus", "partition.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Cases []struct {
			ClientPrefix string         `json:"client_prefix"`
			FNV          uint32         `json:"fnv1a32"`
			Partition    map[string]int `json:"partition"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range v.Cases {
		h := fnv.New32a()
		h.Write([]byte(c.ClientPrefix))
		if h.Sum32() != c.FNV {
			t.Errorf("%s: fnv1a32 %d, want %d", c.ClientPrefix, h.Sum32(), c.FNV)
		}
		for ps, want := range c.Partition {
			P, _ := strconv.Atoi(ps)
			if got := Partition(c.ClientPrefix, P); got != want {
				t.Errorf("Partition(%q, %d) = %d, want %d", c.ClientPrefix, P, got, want)
			}
		}
	}
}

func TestCheckFlags(t *testing.T) {
	for _, pop := range []string{"default", "fra-1", "a", strings.Repeat("x", 32)} {
		if err := CheckPop(pop); err != nil {
			t.Errorf("CheckPop(%q): %v", pop, err)
		}
	}
	for _, pop := range []string{"", "FRA", "a.b", "a b", strings.Repeat("x", 33), "é"} {
		if err := CheckPop(pop); err == nil || !strings.Contains(err.Error(), "--pop") {
			t.Errorf("CheckPop(%q) = %v, want an error naming --pop", pop, err)
		}
	}
	for _, u := range []string{"nats://127.0.0.1:4222", "nats://a:1,nats://b:2", "tls://h:4443"} {
		if _, err := CheckURLs(u); err != nil {
			t.Errorf("CheckURLs(%q): %v", u, err)
		}
	}
	for _, u := range []string{"", "127.0.0.1:4222", "http://h:1", "nats://h", "nats://u:p@h:1", "nats://h:1,"} {
		if _, err := CheckURLs(u); err == nil || !strings.Contains(err.Error(), "--bus") {
			t.Errorf("CheckURLs(%q) = %v, want an error naming --bus", u, err)
		}
	}
}

func newTables(t *testing.T, k bustest.Key, cache string) (*Tables, *strings.Builder) {
	t.Helper()
	keys, err := rules.LoadTableKeys(k.PubFile)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	var mu sync.Mutex
	return &Tables{Keys: keys, Reg: reg, CacheDir: cache, Log: log.New(lockedWriter{&buf, &mu}, "", 0)}, &buf
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestEnvelopeRefusals: a bad signature, another key, a wrong partition,
// an invalid body, garbage are refused and counted; the last good table
// stays.
func TestEnvelopeRefusals(t *testing.T) {
	k, other := bustest.NewKey(t), bustest.NewKey(t)
	tabs, _ := newTables(t, k, "")
	must(t, tabs.Apply(ClusterKey, bustest.Cluster(4), false))
	good := bustest.Table(t, 7, "", nil)
	must(t, tabs.Apply("part.1", k.Envelope(t, 1, good), false))

	badSig := k.Envelope(t, 1, good)
	var env map[string]any
	must(t, json.Unmarshal(badSig, &env))
	env["body"] = "e30=" // "{}" under the signature of another body
	badSig, _ = json.Marshal(env)
	otherKey := other.Envelope(t, 1, good)
	cases := []struct {
		name, key string
		data      []byte
		want      string
	}{
		{"bad signature", "part.1", badSig, "field signature"},
		{"unknown key", "part.1", otherKey, "field key_id"},
		{"wrong partition", "part.1", k.Envelope(t, 2, good), "field partition"},
		{"invalid body", "part.1", k.Envelope(t, 1, []byte(`{"schema":"tailor.decision-table/v1"}`)), "decision table field"},
		{"not JSON", "part.1", []byte("nope"), "not a JSON object"},
		{"bad schema", "part.1", []byte(`{"schema":"x","partition":1,"key_id":"a","signature":"","body":""}`), "field schema"},
		{"partition out of range", "part.1", []byte(`{"schema":"tailor.table-envelope/v1","partition":300,"key_id":"a","signature":"","body":""}`), "field partition"},
		{"oversized", "part.1", make([]byte, MaxEnvelopeBytes+1), "larger than"},
		{"bad key", "part.01", k.Envelope(t, 1, good), "field key"},
		{"bad cluster", ClusterKey, []byte(`{"schema":"tailor.cluster/v1","partitions":0,"salt":"00112233445566778899aabbccddeeff"}`), "cluster.partitions"},
	}
	for i, c := range cases {
		err := tabs.Apply(c.key, c.data, true)
		if err == nil || !errors.Is(err, ErrEnvelope) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrEnvelope naming %q", c.name, err, c.want)
		}
		if got := tabs.Refused(); got != int64(i+1) {
			t.Errorf("%s: refused %d, want %d", c.name, got, i+1)
		}
	}
	s := tabs.Snapshot()
	if s.Partitions != 4 || s.Tables[1] == nil || s.Tables[1].Version != 7 || len(s.Tables) != 1 {
		t.Fatalf("after refusals: %+v, want partition 1 at version 7 of 4", s)
	}
}

// TestWatchAndCache: tables arrive by push, per partition; a refused
// envelope keeps the last good; the cache restores them without a bus.
func TestWatchAndCache(t *testing.T) {
	srv := bustest.Start(t, false)
	_, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	cache := t.TempDir()
	tabs, logs := newTables(t, k, cache)
	snaps := make(chan Snapshot, 16)
	tabs.OnChange(func(s Snapshot) { snaps <- s })
	<-snaps // the initial, empty one
	stopWatch := watch(t, tabs, Options{URLs: srv.URL(), Log: log.New(os.Stderr, "", 0)})

	put := func(key string, v []byte) {
		t.Helper()
		if _, err := kv.Put(context.Background(), key, v); err != nil {
			t.Fatal(err)
		}
	}
	put(ClusterKey, bustest.Cluster(3))
	put("part.0", k.Envelope(t, 0, bustest.Table(t, 1, "", nil)))
	put("part.2", k.Envelope(t, 2, bustest.Table(t, 5, "", nil)))
	s := waitFor(t, snaps, func(s Snapshot) bool { return s.Partitions == 3 && len(s.Tables) == 2 && s.Tables[2].Version == 5 })
	if s.Tables[0].Version != 1 {
		t.Fatalf("partition 0 version %d", s.Tables[0].Version)
	}
	if tabs.Source() != SourceBus {
		t.Errorf("source %q, want bus", tabs.Source())
	}
	put("part.2", k.Envelope(t, 1, bustest.Table(t, 6, "", nil))) // wrong partition
	put("part.2", k.Envelope(t, 2, bustest.Table(t, 7, "", nil)))
	waitFor(t, snaps, func(s Snapshot) bool { return s.Tables[2] != nil && s.Tables[2].Version == 7 })
	if tabs.Refused() != 1 {
		t.Errorf("refused %d, want 1", tabs.Refused())
	}
	if !strings.Contains(logs.String(), "field partition") {
		t.Errorf("refusal not logged:\n%s", logs.String())
	}

	// a fresh edge with the bus down: the cache (verified again)
	stopWatch()
	srv.Stop()
	tabs2, logs2 := newTables(t, k, cache)
	must(t, tabs2.LoadCache())
	s = tabs2.Snapshot()
	if s.Partitions != 3 || len(s.Tables) != 2 || s.Tables[0].Version != 1 || s.Tables[2].Version != 7 {
		t.Fatalf("from cache: %+v", s)
	}
	if tabs2.Source() != SourceCache || !strings.Contains(logs2.String(), "tables from cache") || !strings.Contains(logs2.String(), "2:v7") {
		t.Errorf("source %q, log:\n%s", tabs2.Source(), logs2.String())
	}
	// a tampered cache file is refused (signature), the rest loads
	f := filepath.Join(cache, "part-0.envelope.json")
	must(t, os.WriteFile(f, k.Envelope(t, 2, bustest.Table(t, 9, "", nil)), 0o600))
	tabs3, _ := newTables(t, k, cache)
	must(t, tabs3.LoadCache())
	if s := tabs3.Snapshot(); s.Tables[0] != nil || s.Tables[2].Version != 7 || tabs3.Refused() != 1 {
		t.Fatalf("tampered cache: %+v refused %d", s, tabs3.Refused())
	}
	// an empty cache: none
	tabs4, logs4 := newTables(t, k, t.TempDir())
	must(t, tabs4.LoadCache())
	if tabs4.Source() != SourceNone || !strings.Contains(logs4.String(), "built-in default") {
		t.Errorf("empty cache: source %q log %q", tabs4.Source(), logs4.String())
	}
}

func waitFor(t *testing.T, ch chan Snapshot, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-ch:
			if ok(s) {
				return s
			}
		case <-deadline:
			t.Fatal("timed out waiting for the tables")
		}
	}
}

// watch connects with o and runs tabs.Watch until stop (or the test's end).
func watch(t *testing.T, tabs *Tables, o Options) (stop func()) {
	t.Helper()
	nc, err := Connect(o)
	must(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tabs.Watch(ctx, nc); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWatchSurvivesRestart: the watch resumes after the server restarts
// (same port and store): a table put afterwards arrives.
func TestWatchSurvivesRestart(t *testing.T) {
	srv := bustest.Start(t, false)
	_, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	tabs, _ := newTables(t, k, "")
	snaps := make(chan Snapshot, 16)
	tabs.OnChange(func(s Snapshot) { snaps <- s })
	watch(t, tabs, Options{URLs: srv.URL(), ReconnectWait: 100 * time.Millisecond, Log: log.New(os.Stderr, "", 0)})
	_, err := kv.Put(context.Background(), ClusterKey, bustest.Cluster(2))
	must(t, err)
	waitFor(t, snaps, func(s Snapshot) bool { return s.Partitions == 2 })
	srv.Stop()
	time.Sleep(time.Second)
	srv.Restart()
	_, kv2 := srv.Setup(t) // reconnects; the bucket is still there
	start := time.Now()
	_, err = kv2.Put(context.Background(), "part.1", k.Envelope(t, 1, bustest.Table(t, 8, "", nil)))
	must(t, err)
	waitFor(t, snaps, func(s Snapshot) bool { return s.Tables[1] != nil && s.Tables[1].Version == 8 })
	t.Logf("table after the restart in %v", time.Since(start))
}
