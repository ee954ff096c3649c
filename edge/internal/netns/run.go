package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/tun"
)

// ErrTimeout reports that the client did not finish within Spec.Timeout;
// ErrInterrupted that the caller's context ended first (e.g. a signal).
var (
	ErrTimeout     = errors.New("timeout")
	ErrInterrupted = errors.New("interrupted")
)

// Spec describes one harness run.
type Spec struct {
	Link       *config.Config // link settings; SrvNS/CliNS are overwritten
	ServerCmd  string         // sh command in the server namespace; default none
	ClientCmd  string         // sh command in the client namespace; required
	Timeout    time.Duration  // bound on the whole run; default 60 s
	WaitPort   int            // wait for ServerIP:WaitPort to accept; default 0 = use ReadyDelay
	ReadyDelay time.Duration  // pause after starting the server; default 200 ms
	Stdout     io.Writer      // client stdout; default os.Stdout
	Stderr     io.Writer      // client and server stderr; default os.Stderr
	ServerOut  io.Writer      // server stdout; default os.Stderr
}

// Result is the outcome of a run.
type Result struct {
	ClientExit   int       // client exit status (128+signal if killed)
	Stats        tun.Stats // link statistics
	SrvNS, CliNS string    // the namespaces used (already deleted)
}

// Run executes spec and always removes what it created.
func Run(ctx context.Context, spec Spec) (res Result, err error) {
	spec.defaults()
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	res.SrvNS, res.CliNS = Names()
	defer func() { err = errors.Join(err, teardown(res.SrvNS, res.CliNS)) }()
	lk, err := setup(spec.Link, res.SrvNS, res.CliNS)
	if err != nil {
		return res, err
	}
	res.ClientExit, err = runCommands(ctx, &spec, res.SrvNS, res.CliNS)
	st, stopErr := lk.Stop()
	res.Stats = st
	return res, errors.Join(err, stopErr)
}

func (s *Spec) defaults() {
	if s.Timeout <= 0 {
		s.Timeout = 60 * time.Second
	}
	if s.ReadyDelay <= 0 {
		s.ReadyDelay = 200 * time.Millisecond
	}
	s.Stdout = orDefault(s.Stdout, os.Stdout)
	s.Stderr = orDefault(s.Stderr, os.Stderr)
	s.ServerOut = orDefault(s.ServerOut, os.Stderr)
}

func orDefault(w, def io.Writer) io.Writer {
	if w == nil {
		return def
	}
	return w
}

// setup creates both namespaces and starts and configures the link.
func setup(c *config.Config, srv, cli string) (*tun.Link, error) {
	if err := Add(srv); err != nil {
		return nil, err
	}
	if err := Add(cli); err != nil {
		return nil, err
	}
	c.SrvNS, c.CliNS = srv, cli
	return StartLink(c)
}

// StartLink starts the emulator between existing namespaces c.SrvNS and
// c.CliNS and configures addresses and routes on both TUN devices.
func StartLink(c *config.Config) (*tun.Link, error) {
	lk, err := tun.Start(tun.Options{SrvNS: c.SrvNS, CliNS: c.CliNS, SrvDev: c.SrvDev,
		CliDev: c.CliDev, MTU: c.MTU, FIFOPrio: c.FIFOPrio, Down: c.Down, Up: c.Up, Seed: c.Seed})
	if err != nil {
		return nil, err
	}
	err = Configure(TUNConfig{NS: c.SrvNS, Dev: c.SrvDev, Local: c.SrvIP, Peer: c.CliIP, MTU: c.MTU, RouteOpts: c.RouteOpts})
	if err == nil {
		err = Configure(TUNConfig{NS: c.CliNS, Dev: c.CliDev, Local: c.CliIP, Peer: c.SrvIP, MTU: c.MTU})
	}
	if err != nil {
		_, stopErr := lk.Stop()
		return nil, errors.Join(err, stopErr)
	}
	return lk, nil
}

// teardown deletes whichever of the namespaces exist.
func teardown(names ...string) error {
	var errs []error
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			errs = append(errs, Del(n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: cleanup: %v", ErrNetns, err)
	}
	return nil
}
