package agent

import (
	"context"
	"fmt"
	"log"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Bus is the agent's --bus side (docs/bus.md): the connection, the table
// watcher and the telemetry sink.
type Bus struct {
	NC     *nats.Conn
	Tables *bus.Tables
	Sink   *telemetry.BusSink
}

// CheckBus checks the --bus flags (one error naming the flag).
func (c *Config) CheckBus() error {
	if c.Pop == "" {
		c.Pop = bus.DefaultPop
	}
	if c.Bus == "" {
		switch {
		case c.BusUser != "":
			return fmt.Errorf("%w: --bus-user needs --bus", ErrAgent)
		case c.BusPasswordFile != "":
			return fmt.Errorf("%w: --bus-password-file needs --bus", ErrAgent)
		case c.BusCA != "":
			return fmt.Errorf("%w: --bus-ca needs --bus", ErrAgent)
		case c.Pop != bus.DefaultPop:
			return fmt.Errorf("%w: --pop needs --bus", ErrAgent)
		case c.TableCache != "":
			return fmt.Errorf("%w: --table-cache needs --bus", ErrAgent)
		}
		return nil
	}
	if _, err := bus.CheckURLs(c.Bus); err != nil {
		return fmt.Errorf("%w: %v", ErrAgent, err)
	}
	switch {
	case c.Table != "" || c.TelemetryURL != "" || c.TelemetryOut != "":
		return fmt.Errorf("%w: --bus carries the tables and the telemetry: not with --table, --telemetry-url or --telemetry-out", ErrAgent)
	case c.TablePubKey == "":
		return fmt.Errorf("%w: --table-pubkey is required with --bus (tables from the bus must be signed)", ErrAgent)
	case c.BusUser != "" && c.BusPasswordFile == "":
		return fmt.Errorf("%w: --bus-user needs --bus-password-file", ErrAgent)
	case c.BusUser == "" && c.BusPasswordFile != "":
		return fmt.Errorf("%w: --bus-password-file needs --bus-user", ErrAgent)
	}
	if err := bus.CheckPop(c.Pop); err != nil {
		return fmt.Errorf("%w: %v", ErrAgent, err)
	}
	return nil
}

// OpenBus loads the keys and the cached tables (before any contact with
// the bus), connects (without waiting for the server) and builds the sink.
func OpenBus(cfg *Config) (*Bus, error) {
	cfg.defaults()
	if err := cfg.CheckBus(); err != nil {
		return nil, err
	}
	keys, err := rules.LoadTableKeys(cfg.TablePubKey)
	if err != nil {
		return nil, fmt.Errorf("%w: --table-pubkey: %v", ErrAgent, err)
	}
	logger := log.New(cfg.Log, "tailor-agent: ", 0)
	reg, err := knobsRegistry()
	if err != nil {
		return nil, err
	}
	tabs := &bus.Tables{Keys: keys, Reg: reg, CacheDir: cfg.TableCache, Log: logger}
	if err := tabs.LoadCache(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	nc, err := bus.Connect(bus.Options{URLs: cfg.Bus, User: cfg.BusUser, PasswordFile: cfg.BusPasswordFile,
		CAFile: cfg.BusCA, Name: "tailor-agent " + cfg.Source, Log: logger})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	pub, err := bus.NewPublisher(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	sink := &telemetry.BusSink{Pub: pub, Pop: cfg.Pop, Source: cfg.Source, Partitions: tabs.Partitions, PartitionOf: bus.Partition,
		Limit: cfg.TelemetryLimit, LimitBytes: cfg.TelemetryBufferBytes, Log: logger}
	return &Bus{NC: nc, Tables: tabs, Sink: sink}, nil
}

// Close closes the connection.
func (b *Bus) Close() { b.NC.Close() }

// UseBus makes the agent take its tables from b (call before Start;
// Start then installs the composed table of the cache at once and
// follows the bucket).
func (a *Agent) UseBus(b *Bus) { a.bus = b }

// watch installs the composed table now (the cache) and at every change
// until ctx ends; done is closed when the watch has stopped.
func (a *Agent) watchBus(ctx context.Context, b *Bus) (done chan struct{}) {
	b.Tables.OnChange(a.installSnapshot)
	done = make(chan struct{})
	go func() {
		defer close(done)
		b.Tables.Watch(ctx, b.NC)
	}()
	return done
}

// installSnapshot composes the partitions' tables (rules.MergePartitions)
// and installs the result, its version above the last one installed; on
// error the installed table stays. Calls are serial (bus.Tables.OnChange).
func (a *Agent) installSnapshot(s bus.Snapshot) {
	m, err := rules.MergePartitions(s.Partitions, s.Tables, bus.Partition)
	if m == nil && err == nil {
		return // no table yet
	}
	var c *rules.Compiled
	if err == nil {
		// the sum of the partitions' versions is not unique (a partition gone,
		// a count changed): two composed tables with one version made a closing
		// connection's telemetry name the other table's group (found by review,
		// 2026-12-07). Each composed table gets a version above every one this
		// agent installed (the pinned program's too), so a version names one table.
		last := max(a.composed, a.Version())
		if m.Version <= last {
			m.Version = last + 1
		}
		c, err = rules.Compile(m, a.reg)
	}
	if err == nil {
		err = a.Install(c)
	}
	if err != nil {
		a.tableRejections.Add(1)
		a.setLastError(err)
		fmt.Fprintf(a.cfg.Log, "tailor-agent: keeping table version %d: composed table: %v\n", a.Version(), err)
		return
	}
	a.generatedAt.Store(mathFloat64bits(m.GeneratedAt))
	a.installedAt.Store(nowNano())
	a.composed = m.Version
	a.tableLoads.Add(1)
	a.setLastError(nil)
	var vs []string
	for _, p := range slices.Sorted(maps.Keys(s.Tables)) {
		vs = append(vs, fmt.Sprintf("%d:v%d", p, s.Tables[p].Version))
	}
	fmt.Fprintf(a.cfg.Log, "tailor-agent: installed composed table version %d from %d partitions (%v)\n", m.Version, len(s.Tables), vs)
}

func mathFloat64bits(f float64) uint64 { return math.Float64bits(f) }

func nowNano() int64 { return time.Now().UnixNano() }

func knobsRegistry() (*knobs.Registry, error) {
	reg, err := knobs.Default()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	return reg, nil
}
