package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/netns"
)

// runMain is `tailor-link run`: two fresh namespaces, the link, a server
// and a client command; exits with the client's status.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tailor-link run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f config.File
	var spec netns.Spec
	fs.StringVar(&spec.ServerCmd, "server-cmd", "", "sh command run in the server namespace (default none)")
	fs.StringVar(&spec.ClientCmd, "client-cmd", "", "sh command run in the client namespace (required)")
	fs.DurationVar(&spec.Timeout, "timeout", 60e9, "bound on the whole run")
	fs.IntVar(&spec.WaitPort, "wait-port", 0, "start the client once the server accepts TCP on this port (default: wait --ready-delay)")
	fs.DurationVar(&spec.ReadyDelay, "ready-delay", 200e6, "pause between starting the server and the client")
	c := parse(fs, &f, args, false, stderr)
	if c == nil {
		return exitUsage
	}
	if spec.ClientCmd == "" {
		fmt.Fprintln(stderr, "tailor-link:", fmt.Errorf("%w: client_cmd (--client-cmd): required", config.ErrInvalid))
		return exitUsage
	}
	spec.Link, spec.Stdout, spec.Stderr = c, stdout, stderr
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := netns.Run(ctx, spec)
	return runExit(c, res, err, stderr)
}

func runExit(c *config.Config, res netns.Result, err error, stderr io.Writer) int {
	summary(res, stderr)
	if werr := writeStats(c.Stats, res.Stats); werr != nil {
		err = errors.Join(err, werr)
	}
	switch {
	case errors.Is(err, netns.ErrInterrupted):
		fmt.Fprintln(stderr, "tailor-link:", err, "(cleaned up)")
		return exitSignal
	case err != nil:
		fmt.Fprintln(stderr, "tailor-link:", err)
		return exitFailure
	}
	return res.ClientExit
}

func summary(res netns.Result, w io.Writer) {
	st := res.Stats
	fmt.Fprintf(w, "tailor-link: client exit %d; down in/out %d/%d drops rand/queue %d/%d; up in/out %d/%d drops rand/queue %d/%d; cpu %.1f%% of a core\n",
		res.ClientExit, st.Down.PacketsIn, st.Down.PacketsOut, st.Down.RandomDrops, st.Down.QueueDrops,
		st.Up.PacketsIn, st.Up.PacketsOut, st.Up.RandomDrops, st.Up.QueueDrops, 100*st.CPU.ThreadCoreShare)
}
