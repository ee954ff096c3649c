// Command tailor-probe fingerprints a web server's configuration from outside, as Configanator's
// study does (NSDI'22, §2, Appendix A): TLS version and cipher, the ALPN protocols it accepts, its
// HTTP/2 SETTINGS, whether it advertises HTTP/3 (Alt-Svc), its initial congestion window, its SYN-ACK
// retransmission timeout and, where the path allows, a congestion-control guess.
//
// Usage:
//
//	tailor-probe [--json] [--i-own-this-host] [--sni NAME] [--path /big] [--mss 1460]
//	             [--synack-wait 3.5s] [--raw=true] [--plain] HOST[:PORT]
//
// It refuses targets that are not loopback, private (RFC 1918/ULA) or assigned to this host unless
// --i-own-this-host is given: it withholds ACKs and leaves half-open connections. The initial window
// and SYN-ACK timeout need root; without it they are listed as skipped, with the reason.
//
// Exit status: 0 when the probe ran (steps that failed are listed under errors), 1 when the target
// could not be reached at all, 2 with one line "tailor-probe: error: ..." for bad input or a refused
// target.
package main

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

	"github.com/tailor-project/tailor/edge/internal/fingerprint"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tailor-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	own := fs.Bool("i-own-this-host", false, "probe a public address (only servers you operate)")
	sni := fs.String("sni", "", "TLS server name and Host header (default: the host if it is a name)")
	path := fs.String("path", "/", "object fetched for the initial window; larger than IW x MSS (e.g. 1 MB)")
	mss := fs.Int("mss", 1460, "TCP_MAXSEG of the initial-window connection, 88..65495")
	wait := fs.Duration("synack-wait", 3500*time.Millisecond, "wait for the first SYN-ACK retransmission, 0.2s..10s")
	raw := fs.Bool("raw", true, "run the root-only measurements (initial window, SYN-ACK timeout)")
	iwTrials := fs.Int("iw-trials", fingerprint.DefaultIWTrials, "initial-window measurements; the smallest complete count is reported, 1..5")
	plain := fs.Bool("plain", false, "the target speaks cleartext HTTP/1.1 (no TLS, ALPN, SETTINGS)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tailor-probe [flags] HOST[:PORT]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tailor-probe: error: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() != 1:
		return usage("one HOST[:PORT] argument expected, got %d", fs.NArg())
	case *mss < 88 || *mss > 65495:
		return usage("--mss %d: must be 88..65495 (the kernel's TCP_MAXSEG range)", *mss)
	case *wait < 200*time.Millisecond || *wait > 10*time.Second:
		return usage("--synack-wait %v: must be 0.2s..10s", *wait)
	case len(*path) == 0 || (*path)[0] != '/' || len(*path) > 2048:
		return usage("--path %q: must start with / and be at most 2048 bytes", *path)
	case *iwTrials < 1 || *iwTrials > fingerprint.MaxIWTrials:
		return usage("--iw-trials %d: must be 1..%d", *iwTrials, fingerprint.MaxIWTrials)
	case len(*sni) > 253:
		return usage("--sni: at most 253 bytes")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	target, err := fingerprint.ParseTarget(ctx, fs.Arg(0))
	if err != nil {
		return usage("%v", err)
	}
	if err := fingerprint.CheckOwnHost(target.Addr.Addr(), fingerprint.LocalPrefixes(), *own); err != nil {
		return usage("%v", err)
	}
	if *sni == "" && target.Name != target.Addr.Addr().String() {
		*sni = target.Name // a host name, not an address literal
	}
	p := &fingerprint.Prober{Target: target, SNI: *sni, Path: *path, MSS: *mss, SynAckWait: *wait, Raw: *raw, Plain: *plain,
		IWTrials: *iwTrials}
	res, err := p.Run(ctx)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		_ = enc.Encode(res)
	} else {
		_ = res.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tailor-probe: error: %v\n", err)
		return 1
	}
	return 0
}
