package bus

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Where the tables in force came from (tailor_table_source).
const (
	SourceNone  = "none"
	SourceCache = "cache"
	SourceBus   = "bus"
)

var sources = []string{SourceNone, SourceCache, SourceBus}

// Cache file names in --table-cache.
const (
	clusterFile = "cluster.json"
	partPrefix  = "part-"
	partSuffix  = ".envelope.json"
)

// Snapshot is the set of tables in force.
type Snapshot struct {
	Partitions int                  // P from the cluster document; 0 = none yet
	Tables     map[int]*rules.Table // verified tables by partition (p < Partitions)
}

// Table is the table of the partition of clientPrefix (nil: none).
func (s Snapshot) Table(clientPrefix string) *rules.Table {
	if s.Partitions == 0 {
		return nil
	}
	return s.Tables[Partition(clientPrefix, s.Partitions)]
}

// Tables watches the tailor-tables bucket (keys part.* and cluster),
// verifies every envelope with Keys, keeps the last good table of each
// partition, caches what it applies in CacheDir and hands every new
// Snapshot to OnChange.
type Tables struct {
	Keys     []rules.TableKey // --table-pubkey (required)
	Reg      *knobs.Registry
	CacheDir string      // --table-cache ("" = no cache)
	Log      *log.Logger // default log.Default()
	Prefix   string      // log prefix; default "bus: "

	mu       sync.Mutex // serialises applies and OnChange
	onChange func(Snapshot)
	parts    int
	tables   map[int]*rules.Table
	digests  map[int][32]byte // of the applied envelopes
	cluster  [32]byte         // of the applied cluster document

	refused atomic.Int64
	applied atomic.Int64
	source  atomic.Value // string
	version *prometheus.GaugeVec
}

// OnChange sets the callback and calls it at once with the current
// snapshot; later calls come after each change (serially).
func (t *Tables) OnChange(f func(Snapshot)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = f
	if f != nil {
		f(t.snapshotLocked())
	}
}

// Snapshot is the current set of tables.
func (t *Tables) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.snapshotLocked()
}

func (t *Tables) snapshotLocked() Snapshot {
	s := Snapshot{Partitions: t.parts, Tables: map[int]*rules.Table{}}
	for p, tab := range t.tables {
		if t.parts > 0 && p < t.parts {
			s.Tables[p] = tab
		}
	}
	return s
}

// Partitions is P from the cluster document (0 = not known yet).
func (t *Tables) Partitions() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parts
}

// Refused counts envelopes and cluster documents refused (bad signature,
// wrong partition, invalid table, oversized...).
func (t *Tables) Refused() int64 { return t.refused.Load() }

// Applied counts envelopes installed (from the cache and the bus).
func (t *Tables) Applied() int64 { return t.applied.Load() }

// Source is where the tables in force came from: none, cache or bus.
func (t *Tables) Source() string {
	if s, ok := t.source.Load().(string); ok {
		return s
	}
	return SourceNone
}

// RegisterMetrics exports tailor_table_source{source}, the refusals and
// installations, and each partition's table version.
func (t *Tables) RegisterMetrics(reg prometheus.Registerer) {
	for _, src := range sources {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tailor_table_source",
			Help:        "1 for where the tables in force came from: cache (--table-cache, until the bus delivers), bus, none (built-in default).",
			ConstLabels: prometheus.Labels{"source": src}}, func() float64 {
			if t.Source() == src {
				return 1
			}
			return 0
		}))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tailor_table_envelopes_refused_total",
		Help: "Table envelopes and cluster documents refused (signature, key id, partition, invalid table, size); the last good table stays."},
		func() float64 { return float64(t.refused.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tailor_table_envelopes_applied_total",
		Help: "Table envelopes installed (from the cache and the bus)."}, func() float64 { return float64(t.applied.Load()) }))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tailor_table_partition_version",
		Help: "Version of each partition's table in force."}, []string{"partition"})
	reg.MustRegister(t.version)
	for p, tab := range t.tables {
		t.version.WithLabelValues(strconv.Itoa(p)).Set(float64(tab.Version))
	}
}

func (t *Tables) logf(format string, args ...any) {
	l := t.Log
	if l == nil {
		l = log.Default()
	}
	p := t.Prefix
	if p == "" {
		p = "bus: "
	}
	l.Printf(p+format, args...)
}

// Apply handles one bucket value: key "cluster" or "part.<p>". fromBus
// marks it as delivered by the bus (then it is also cached). A refused
// value leaves the tables as they are and is counted.
func (t *Tables) Apply(key string, value []byte, fromBus bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var err error
	if key == ClusterKey {
		err = t.applyCluster(value, fromBus)
	} else if p, ok := partKey(key); ok {
		err = t.applyEnvelope(p, value, fromBus)
	} else {
		err = refuse("key", "%q: want %s or %s<partition 0..%d>", truncate(key, 40), ClusterKey, PartKeyPrefix, MaxPartitions-1)
	}
	if err != nil {
		t.refused.Add(1)
	}
	return err
}

func (t *Tables) applyCluster(data []byte, fromBus bool) error {
	d := sha256.Sum256(data)
	if d == t.cluster && t.parts > 0 {
		t.delivered(fromBus)
		return nil
	}
	c, err := ParseCluster(data)
	if err != nil {
		return err
	}
	if fromBus {
		if err := t.cache(clusterFile, data); err != nil {
			t.logf("table cache: %v", err)
		}
	}
	changed := c.Partitions != t.parts
	t.parts, t.cluster = c.Partitions, d
	t.delivered(fromBus)
	if changed {
		t.logf("cluster: %d partitions", c.Partitions)
		t.emit()
	}
	return nil
}

func (t *Tables) applyEnvelope(p int, data []byte, fromBus bool) error {
	d := sha256.Sum256(data)
	if old, ok := t.digests[p]; ok && old == d {
		t.delivered(fromBus)
		return nil
	}
	body, err := OpenEnvelope(data, p, t.Keys)
	if err != nil {
		return fmt.Errorf("part.%d: %w", p, err)
	}
	tab, err := rules.Parse(body, t.Reg)
	if err != nil {
		return fmt.Errorf("part.%d: %w: body: %w", p, ErrEnvelope, err)
	}
	if fromBus {
		if err := t.cache(partPrefix+strconv.Itoa(p)+partSuffix, data); err != nil {
			t.logf("table cache: %v", err)
		}
	}
	if t.tables == nil {
		t.tables, t.digests = map[int]*rules.Table{}, map[int][32]byte{}
	}
	t.tables[p], t.digests[p] = tab, d
	t.applied.Add(1)
	t.delivered(fromBus)
	if t.version != nil {
		t.version.WithLabelValues(strconv.Itoa(p)).Set(float64(tab.Version))
	}
	t.logf("partition %d: applied table version %d (%d rules)", p, tab.Version, len(tab.Rules))
	t.emit()
	return nil
}

func (t *Tables) delivered(fromBus bool) {
	if fromBus {
		t.source.Store(SourceBus)
	} else if t.Source() == SourceNone {
		t.source.Store(SourceCache)
	}
}

func (t *Tables) emit() {
	if t.onChange != nil {
		t.onChange(t.snapshotLocked())
	}
}

// cache writes name in CacheDir: a temporary file, fsync, rename, fsync
// of the directory (a crash leaves the old or the new file).
func (t *Tables) cache(name string, data []byte) error {
	if t.CacheDir == "" {
		return nil
	}
	return WriteFileAtomic(filepath.Join(t.CacheDir, name), data)
}

// WriteFileAtomic replaces path with data (temporary file in the same
// directory, fsync, rename, directory fsync).
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// LoadCache reads CacheDir (creating it) and applies what verifies there,
// before any contact with the bus. It logs "tables from cache" with the
// versions, or that the built-in default is served.
func (t *Tables) LoadCache() error {
	if t.CacheDir == "" {
		t.logf("no --table-cache: serving the built-in default until the bus delivers tables")
		return nil
	}
	if err := os.MkdirAll(t.CacheDir, 0o700); err != nil {
		return fmt.Errorf("--table-cache: %v", err)
	}
	if data, err := ReadBounded(filepath.Join(t.CacheDir, clusterFile), maxClusterBytes); err == nil {
		if err := t.Apply(ClusterKey, data, false); err != nil {
			t.logf("table cache %s: %v", clusterFile, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.logf("table cache: %v", err)
	}
	ents, err := os.ReadDir(t.CacheDir)
	if err != nil {
		return fmt.Errorf("--table-cache: %v", err)
	}
	for _, e := range ents {
		name := e.Name()
		num, ok := strings.CutSuffix(strings.TrimPrefix(name, partPrefix), partSuffix)
		if !strings.HasPrefix(name, partPrefix) || !ok || !e.Type().IsRegular() {
			continue
		}
		data, err := ReadBounded(filepath.Join(t.CacheDir, name), MaxEnvelopeBytes)
		if err != nil {
			t.logf("table cache: %v", err)
			continue
		}
		if err := t.Apply(PartKeyPrefix+num, data, false); err != nil {
			t.logf("table cache %s: %v (ignored)", name, err)
		}
	}
	s := t.Snapshot()
	if len(s.Tables) == 0 {
		t.logf("no cached tables in %s: serving the built-in default until the bus delivers tables", t.CacheDir)
		return nil
	}
	ps := make([]int, 0, len(s.Tables))
	for p := range s.Tables {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var vs []string
	for _, p := range ps {
		vs = append(vs, fmt.Sprintf("%d:v%d", p, s.Tables[p].Version))
	}
	t.logf("tables from cache %s: %d partitions, versions %s", t.CacheDir, s.Partitions, strings.Join(vs, " "))
	return nil
}

// ReadBounded reads path, refusing a file larger than limit bytes.
func ReadBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// Watch follows the bucket until ctx ends: the current values first, then
// every change (push). It waits for the connection and for the bucket
// (the managers create it), and starts over if the watch breaks.
func (t *Tables) Watch(ctx context.Context, nc *nats.Conn) {
	last := ""
	for ctx.Err() == nil {
		err := t.watchOnce(ctx, nc)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errReconnected) {
			continue // re-watch at once (the current values come again; unchanged ones are skipped)
		}
		if msg := fmt.Sprint(err); msg != last {
			t.logf("table watch: %v (retrying)", err)
			last = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

var errReconnected = errors.New("reconnected")

func (t *Tables) watchOnce(ctx context.Context, nc *nats.Conn) error {
	for !nc.IsConnected() {
		if nc.IsClosed() {
			return errors.New("connection closed")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	kv, err := js.KeyValue(lctx, TablesBucket)
	cancel()
	if err != nil {
		return fmt.Errorf("bucket %s: %w", TablesBucket, err)
	}
	reconnects := nc.Stats().Reconnects
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	wc, err := kv.Watch(wctx, ClusterKey)
	if err != nil {
		return fmt.Errorf("watch %s: %w", ClusterKey, err)
	}
	defer func() { _ = wc.Stop() }()
	wp, err := kv.Watch(wctx, PartKeyPrefix+"*")
	if err != nil {
		return fmt.Errorf("watch %s*: %w", PartKeyPrefix, err)
	}
	defer func() { _ = wp.Stop() }()
	cu, pu := wc.Updates(), wp.Updates()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for cu != nil || pu != nil {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			// after a reconnect the server may have lost the watch's
			// consumer (a restart): start over at once rather than wait
			// for the ordered consumer's missed heartbeats
			if n := nc.Stats().Reconnects; n != reconnects && nc.IsConnected() {
				return errReconnected
			}
			continue
		case e, ok = <-cu:
			if !ok {
				cu = nil
			}
		case e, ok = <-pu:
			if !ok {
				pu = nil
			}
		}
		if e == nil { // closed, or the end of the initial values
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			t.logf("%s deleted from the bucket: keeping its last good value", e.Key())
			continue
		}
		if err := t.Apply(e.Key(), e.Value(), true); err != nil {
			t.logf("refused %v (keeping the last good table)", err)
		}
	}
	return errors.New("watch ended")
}
