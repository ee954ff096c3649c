// Command tailor-agent applies a Tailor decision table per TCP connection
// with a cgroup sock_ops program and reports one telemetry record per
// connection. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

const usage = `usage:
  tailor-agent run [--table FILE|URL] [--telemetry-out FILE|- | --telemetry-url URL] [--cgroup PATH]
                   [--pin DIR] [--full-address] [--poll DUR] [--table-pubkey F] [--manager-ca F]
                   [--telemetry-buffer-bytes N] [--metrics HOST:PORT] [-- server command...]
  tailor-agent run --bus nats://HOST:PORT --table-pubkey F [--bus-user U --bus-password-file F]
                   [--bus-ca F] [--pop NAME] [--table-cache DIR] ... [-- server command...]
  tailor-agent check TABLE        validate and compile a table, print what the TCP layer applies
  tailor-agent cleanup --pin DIR [--cgroup PATH]
  tailor-agent bench lpm|conn [flags]   (see bench/agent/run.sh)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "check":
		err = checkCmd(os.Args[2:])
	case "cleanup":
		err = cleanupCmd(os.Args[2:])
	case "bench":
		err = benchCmd(os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tailor-agent: %v\n", err)
		os.Exit(1)
	}
}

func runCmd(args []string) error {
	var cfg agent.Config
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&cfg.Table, "table", "", "decision table file or http(s) URL (polled with If-None-Match)")
	fs.DurationVar(&cfg.Poll, "poll", 5*time.Second, "table poll interval")
	fs.StringVar(&cfg.TelemetryOut, "telemetry-out", "", "JSON-lines telemetry file, - for stdout")
	fs.StringVar(&cfg.TelemetryURL, "telemetry-url", "", "manager URL for batched POSTs (bearer token from $TAILOR_TOKEN)")
	fs.StringVar(&cfg.Cgroup, "cgroup", "", "cgroup v2 path to attach to (default: create one for this run)")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", "/sys/fs/cgroup/unified", "cgroup v2 mount")
	fs.StringVar(&cfg.Pin, "pin", "", "private bpffs dir: pin maps and link so a restart keeps tuning")
	fs.BoolVar(&cfg.FullAddress, "full-address", false, "report client_addr (the full client address) besides client_prefix (its /24 or /64)")
	fs.StringVar(&cfg.Source, "source", "", "instance id in telemetry (default agent-<hostname>)")
	fs.StringVar(&cfg.TablePubKey, "table-pubkey", "", "PEM file of Ed25519 public keys (PKIX); every table must carry a signature by one of them (URL: X-Tailor-Signature, file: PATH.sig)")
	fs.StringVar(&cfg.ManagerCA, "manager-ca", "", "PEM CA bundle to verify https:// --table and --telemetry-url URLs (default: system roots)")
	fs.IntVar(&cfg.TelemetryBufferBytes, "telemetry-buffer-bytes", 16<<20, "telemetry buffer bound in (estimated) encoded bytes")
	fs.BoolVar(&cfg.NoTrackRate, "no-track-rate", false, "do not track the max delivery rate (RTT_CB)")
	fs.StringVar(&cfg.Metrics, "metrics", "", "HOST:PORT for a read-only Prometheus /metrics listener (bind it to loopback or a management network; default off)")
	fs.StringVar(&cfg.Bus, "bus", "", "nats://HOST:PORT[,nats://...]: tables and telemetry over NATS JetStream (docs/bus.md); not with --table/--telemetry-*; needs --table-pubkey")
	fs.StringVar(&cfg.BusUser, "bus-user", "", "--bus user name")
	fs.StringVar(&cfg.BusPasswordFile, "bus-password-file", "", "file holding the --bus user's password (first line)")
	fs.StringVar(&cfg.BusCA, "bus-ca", "", "PEM file of the CA certificate(s) that signed the --bus servers' certificates: TLS required, server verified (default: tls:// URLs against the system roots)")
	fs.StringVar(&cfg.Pop, "pop", "default", "--bus: point of presence, [a-z0-9-]{1,32} (telemetry subject tailor.tel.<pop>.<partition>)")
	fs.StringVar(&cfg.TableCache, "table-cache", "", "--bus: directory for the last good tables (loaded at start before the bus answers)")
	_ = fs.Parse(args)
	if err := cfg.CheckBus(); err != nil {
		return err
	}
	if cfg.TelemetryOut != "" && cfg.TelemetryURL != "" {
		return errors.New("use one of --telemetry-out and --telemetry-url")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return agent.Run(ctx, cfg, fs.Args())
}

func checkCmd(args []string) error {
	if len(args) != 1 {
		return errors.New("check needs one table file")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	reg, err := knobs.Default()
	if err != nil {
		return err
	}
	t, err := rules.Parse(data, reg)
	if err != nil {
		return err
	}
	c, err := rules.Compile(t, reg)
	if err != nil {
		return err
	}
	draws := "per-connection draws (no salt)"
	if c.Salted {
		draws = "per-client cohort draws (salt)"
	}
	fmt.Printf("table version %d: %d configs, %d groups, %d TCP-layer prefixes, holdback %.3f, %s\n",
		c.Version, len(c.Configs), len(c.Groups), len(c.Prefixes), c.Holdback, draws)
	for _, why := range c.Ignored {
		fmt.Println("ignored at the TCP layer:", why)
	}
	return nil
}

func cleanupCmd(args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ExitOnError)
	pin := fs.String("pin", "", "bpffs dir given to run --pin")
	cg := fs.String("cgroup", "", "cgroup to remove (must be empty)")
	_ = fs.Parse(args)
	return agent.Cleanup(*pin, *cg)
}
