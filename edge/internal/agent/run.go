package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/tailor-project/tailor/edge/internal/metrics"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// NewSink builds the telemetry sink the config asks for (nil = off). The
// returned closer closes an output file.
func NewSink(cfg *Config) (telemetry.Sink, io.Closer, error) {
	cfg.defaults()
	switch {
	case cfg.TelemetryURL != "":
		client, err := rules.ManagerClient(cfg.ManagerCA)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --manager-ca: %v", ErrAgent, err)
		}
		return &telemetry.HTTPSink{URL: cfg.TelemetryURL, Token: cfg.Token, Source: cfg.Source, Limit: cfg.TelemetryLimit,
			LimitBytes: cfg.TelemetryBufferBytes, Client: client, Log: log.New(cfg.Log, "tailor-agent: ", 0)}, io.NopCloser(nil), nil
	case cfg.TelemetryOut == "-":
		return telemetry.NewLineSink(os.Stdout, cfg.Source), io.NopCloser(nil), nil
	case cfg.TelemetryOut != "":
		f, err := os.OpenFile(cfg.TelemetryOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: telemetry out: %v", ErrAgent, err)
		}
		return telemetry.NewLineSink(f, cfg.Source), f, nil
	}
	return nil, io.NopCloser(nil), nil
}

// NewSource is the table source of cfg: bearer token, --manager-ca and
// --table-pubkey applied.
func NewSource(cfg *Config) (*rules.Source, error) {
	cfg.defaults()
	client, err := rules.ManagerClient(cfg.ManagerCA)
	if err != nil {
		return nil, fmt.Errorf("%w: --manager-ca: %v", ErrAgent, err)
	}
	src := &rules.Source{Loc: cfg.Table, Client: client, Token: cfg.Token}
	if cfg.TablePubKey != "" {
		if src.Keys, err = rules.LoadTableKeys(cfg.TablePubKey); err != nil {
			return nil, fmt.Errorf("%w: --table-pubkey: %v", ErrAgent, err)
		}
	}
	return src, nil
}

// discard is the sink when telemetry is off: events are still drained so
// the ring buffer never fills.
type discard struct{}

func (discard) Add(telemetry.Record)        {}
func (discard) Flush(context.Context) error { return nil }
func (discard) Dropped() int64              { return 0 }

// Run is `tailor-agent run`: open, install the first table, serve tables
// and telemetry, run argv (if any) in the cgroup until it exits or ctx ends.
func Run(ctx context.Context, cfg Config, argv []string) error {
	if err := cfg.CheckBus(); err != nil {
		return err
	}
	var sink telemetry.Sink
	var b *Bus
	if cfg.Bus != "" {
		var err error
		if b, err = OpenBus(&cfg); err != nil {
			return err
		}
		defer b.Close()
		sink = b.Sink
	} else {
		s, closer, err := NewSink(&cfg)
		if err != nil {
			return err
		}
		defer closer.Close()
		sink = s
	}
	if sink == nil {
		sink = discard{}
	}
	var err error
	var ms *metrics.Server
	if cfg.Metrics != "" { // before loading anything: a taken port is an early, clear error
		if ms, err = metrics.Listen(cfg.Metrics); err != nil {
			return fmt.Errorf("%w: %v", ErrAgent, err)
		}
		defer ms.Close()
	}
	a, err := Open(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	if b != nil {
		a.UseBus(b)
	}
	if ms != nil {
		a.RegisterMetrics(ms.Registry, sink)
		if b != nil {
			b.Tables.RegisterMetrics(ms.Registry)
		}
		fmt.Fprintf(a.cfg.Log, "tailor-agent: metrics on http://%s%s\n", ms.Addr(), metrics.Path)
	}
	stop, err := a.Start(ctx, sink)
	if err != nil {
		return err
	}
	runErr := a.serve(ctx, argv)
	stop()
	if st, err := a.Stats(); err == nil {
		fmt.Fprintf(a.cfg.Log, "tailor-agent: %s dropped=%d\n", st, sink.Dropped())
	}
	return runErr
}

// Start installs the first table, then reads events into sink and polls
// the table source in the background until stop is called.
func (a *Agent) Start(ctx context.Context, sink telemetry.Sink) (stop func(), err error) {
	src, err := NewSource(&a.cfg)
	if err != nil {
		return nil, err
	}
	if err := a.firstTable(ctx, src); err != nil {
		return nil, err
	}
	if a.cfg.Table != "" && len(src.Keys) == 0 {
		fmt.Fprintf(a.cfg.Log, "tailor-agent: warning: no --table-pubkey: tables from %s are accepted unsigned\n", a.cfg.Table)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.ReadEvents(ctx, sink) }()
	if a.cfg.Table != "" {
		go a.PollTables(ctx, src)
	}
	watched := make(chan struct{})
	if a.bus != nil {
		watched = a.watchBus(ctx, a.bus)
	} else {
		close(watched)
	}
	return func() {
		cancel()
		a.drain(done)
		<-watched
	}, nil
}

// firstTable installs the configured table; if that fails, the agent only
// continues when pinned maps still hold a previous table.
func (a *Agent) firstTable(ctx context.Context, src *rules.Source) error {
	if a.cfg.Table == "" {
		return nil
	}
	err := a.Refresh(ctx, src)
	if err != nil && a.Version() == 0 {
		return err
	}
	return nil
}

// serve runs argv in the cgroup, forwarding cancellation as SIGTERM.
func (a *Agent) serve(ctx context.Context, argv []string) error {
	if len(argv) == 0 {
		<-ctx.Done()
		return nil
	}
	cmd, release, err := a.Command(argv...)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Start()
	release()
	if err != nil {
		return fmt.Errorf("%w: start server: %v", ErrAgent, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		err = stop(cmd, exited)
	}
	return serverExit(err)
}

func stop(cmd *exec.Cmd, exited chan error) error {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		return err
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return <-exited
	}
}

func serverExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: server: %v", ErrAgent, ee)
	}
	return err
}

// drain lets the reader pick up the last events, then stops it.
func (a *Agent) drain(done chan error) {
	time.Sleep(2 * a.cfg.FlushEvery)
	_ = a.reader.Close()
	if err := <-done; err != nil {
		fmt.Fprintf(a.cfg.Log, "tailor-agent: %v\n", err)
	}
}
