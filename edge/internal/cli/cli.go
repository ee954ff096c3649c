// Package cli implements the tailor-link command line.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/tun"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitSignal  = 130
)

// Main runs tailor-link with args (without the program name).
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "run":
			return runMain(args[1:], stdout, stderr)
		case "sweep":
			return sweepMain(stderr)
		}
	}
	return linkMain(args, stderr)
}

// parse loads --config, applies flags and validates; nil on error (already
// reported).
func parse(fs *flag.FlagSet, f *config.File, args []string, needNS bool, stderr io.Writer) *config.Config {
	if p := configPath(args); p != "" {
		if err := config.Load(p, f); err != nil {
			fmt.Fprintln(stderr, "tailor-link:", err)
			return nil
		}
	}
	linkFlags(fs, f)
	if fs.Parse(args) != nil {
		return nil
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tailor-link: unexpected argument %q\n", fs.Arg(0))
		return nil
	}
	c, err := config.Resolve(f, needNS)
	if err != nil {
		fmt.Fprintln(stderr, "tailor-link:", err)
		return nil
	}
	return c
}

// linkMain runs the emulator between two existing namespaces until
// SIGINT/SIGTERM or --duration.
func linkMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("tailor-link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f config.File
	fs.StringVar(&f.SrvNS, "srv-ns", "", "server namespace (name under /run/netns or a path)")
	fs.StringVar(&f.CliNS, "cli-ns", "", "client namespace (name under /run/netns or a path)")
	dur := fs.Duration("duration", 0, "stop after this long (default: run until SIGINT/SIGTERM)")
	c := parse(fs, &f, args, true, stderr)
	if c == nil {
		return exitUsage
	}
	ctx, stop := signalContext(*dur)
	defer stop()
	lk, err := netns.StartLink(c)
	if err != nil {
		fmt.Fprintln(stderr, "tailor-link:", err)
		return exitFailure
	}
	<-ctx.Done()
	st, err := lk.Stop()
	return finish(c, st, err, stderr)
}

func signalContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	if d <= 0 {
		return ctx, stop
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	return tctx, func() { cancel(); stop() }
}

// finish writes the stats file and maps err to an exit code.
func finish(c *config.Config, st tun.Stats, err error, stderr io.Writer) int {
	if werr := writeStats(c.Stats, st); werr != nil {
		err = errors.Join(err, werr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tailor-link:", err)
		return exitFailure
	}
	return exitOK
}

func writeStats(path string, st tun.Stats) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func sweepMain(stderr io.Writer) int {
	done, err := netns.Sweep()
	for _, n := range done {
		fmt.Fprintln(stderr, "tailor-link: deleted stale namespace", n)
	}
	if err != nil {
		fmt.Fprintln(stderr, "tailor-link:", err)
		return exitFailure
	}
	return exitOK
}
