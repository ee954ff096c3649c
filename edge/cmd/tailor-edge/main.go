// Command tailor-edge is an HTTPS server (HTTP/1.1, HTTP/2 and, with --quic,
// HTTP/3) that tunes ALPN (HTTP version), HTTP/2 SETTINGS, QUIC transport
// parameters and setsockopt transport knobs per connection from a Tailor
// decision table. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/tailor-project/tailor/edge/internal/edge"
)

// Exit statuses: 2 for bad input (flags, configuration, table, certificate),
// 1 for a failure while running.
const (
	exitRuntime  = 1
	exitBadInput = 2
)

func main() {
	cfg, prof, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tailor-edge: error:", err)
		os.Exit(exitBadInput)
	}
	if err := run(cfg, prof); err != nil {
		fmt.Fprintln(os.Stderr, "tailor-edge: error:", err)
		if errors.Is(err, edge.ErrConfig) || errors.Is(err, edge.ErrTable) {
			os.Exit(exitBadInput)
		}
		os.Exit(exitRuntime)
	}
}

// parseFlags reads the command line. A bad flag gives one error naming it
// (no usage dump); --help prints the usage to help and returns flag.ErrHelp.
// prof is --cpuprofile ("" for none).
func parseFlags(args []string, help io.Writer) (c edge.Config, prof string, err error) {
	fs := flag.NewFlagSet("tailor-edge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8443", "HOST:PORT to serve HTTPS on (TCP; with --quic also UDP)")
	fs.StringVar(&c.Root, "root", "", "directory of static files (required without --upstream; with it, only regular files are served from here)")
	fs.StringVar(&c.Upstream, "upstream", "", "reverse-proxy URL for paths not under --root")
	fs.StringVar(&c.CertFile, "cert", "", "PEM certificate")
	fs.StringVar(&c.KeyFile, "key", "", "PEM private key")
	fs.BoolVar(&c.SelfSigned, "self-signed", false, "use an in-memory self-signed certificate")
	fs.StringVar(&c.Table, "table", "", "decision table file or http(s) URL (polled with If-None-Match)")
	fs.DurationVar(&c.Poll, "poll", 0, "table poll period (default 5s)")
	fs.StringVar(&c.Telemetry, "telemetry", "", "telemetry URL, or - for JSON lines on stdout")
	fs.BoolVar(&c.ApplySocket, "apply-socket", true, "apply setsockopt knobs per connection")
	fs.BoolVar(&c.InjectBeacon, "inject-beacon", false, "append the page-load beacon script to HTML responses")
	fs.BoolVar(&c.FullAddress, "full-address", false, "report client_addr as well as client_prefix")
	fs.BoolVar(&c.QUIC, "quic", false, "also serve HTTP/3 over QUIC on the same UDP port (Alt-Svc on TCP responses)")
	fs.BoolVar(&c.Static, "static", false, "no per-connection selection: every connection gets the table default (benchmark baseline)")
	fs.StringVar(&c.DeviceMap, "device-map", "", `JA4 -> device class JSON file (tailor.device-map/v1); unmapped clients are "unknown"`)
	fs.BoolVar(&c.ConnRecords, "connection-records", true, `with --telemetry, also one kind "connection" record per TCP/QUIC connection at close (TCP_INFO / QUIC stats)`)
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", 10*time.Second, "limit for the TLS handshake and the request headers")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 60*time.Second, "limit for reading a whole request (headers and body)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 60*time.Second, "a response write that makes no progress for this long closes the connection (slow readers)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 120*time.Second, "keep-alive: close a connection idle for this long")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", 30*time.Second, "--upstream: limit for the dial, the TLS handshake and the response headers each (then 504)")
	fs.IntVar(&c.TelemetryBufferBytes, "telemetry-buffer-bytes", 16<<20, "telemetry buffer bound in (estimated) encoded bytes; beyond it records are dropped and counted")
	fs.StringVar(&c.TablePubKey, "table-pubkey", "", "PEM file of Ed25519 public keys (PKIX); every table must carry a signature by one of them (URL: X-Tailor-Signature, file: PATH.sig)")
	fs.StringVar(&c.ManagerCA, "manager-ca", "", "PEM CA bundle to verify https:// --table and --telemetry URLs (default: system roots)")
	fs.StringVar(&c.Metrics, "metrics", "", "HOST:PORT for a read-only Prometheus /metrics listener (bind it to loopback or a management network; default off)")
	fs.StringVar(&c.GeoIPASN, "geoip-asn", "", "MaxMind-format ASN database (GeoLite2-ASN): asn in telemetry records")
	fs.StringVar(&c.GeoIPRegion, "geoip-region", "", "MaxMind-format City or Country database (GeoLite2-City/-Country): region (CC or CC-SUB) in telemetry records")
	fs.StringVar(&c.Bus, "bus", "", "nats://HOST:PORT[,nats://...]: tables and telemetry over NATS JetStream (docs/bus.md); not with --table or --telemetry; needs --table-pubkey")
	fs.StringVar(&c.BusUser, "bus-user", "", "--bus user name")
	fs.StringVar(&c.BusPasswordFile, "bus-password-file", "", "file holding the --bus user's password (first line)")
	fs.StringVar(&c.BusCA, "bus-ca", "", "PEM file of the CA certificate(s) that signed the --bus servers' certificates: TLS required, server verified (default: tls:// URLs against the system roots)")
	fs.StringVar(&c.Pop, "pop", "default", "--bus: this edge's point of presence, [a-z0-9-]{1,32} (telemetry subject tailor.tel.<pop>.<partition>)")
	fs.StringVar(&c.TableCache, "table-cache", "", "directory for the last good tables (written on every change, loaded at start before the bus or the manager answers)")
	fs.StringVar(&prof, "cpuprofile", "", "write a pprof CPU profile (500 Hz) of the whole run to this file at shutdown (benchmarking)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, help)
		}
		return c, prof, err
	}
	if fs.NArg() > 0 {
		return c, prof, fmt.Errorf("unexpected argument %q (every option is a --flag)", fs.Arg(0))
	}
	if c.Poll < 0 {
		return c, prof, fmt.Errorf("--poll %v: must not be negative", c.Poll)
	}
	for name, d := range map[string]time.Duration{"--read-header-timeout": c.ReadHeaderTimeout, "--read-timeout": c.ReadTimeout,
		"--write-timeout": c.WriteTimeout, "--idle-timeout": c.IdleTimeout, "--upstream-timeout": c.UpstreamTimeout} {
		if d <= 0 {
			return c, prof, fmt.Errorf("%s %v: must be positive", name, d)
		}
	}
	if c.TelemetryBufferBytes < 64<<10 {
		return c, prof, fmt.Errorf("--telemetry-buffer-bytes %d: must be at least 65536", c.TelemetryBufferBytes)
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		return c, prof, fmt.Errorf("--listen %q: want HOST:PORT", c.Listen)
	}
	if _, port, err := net.SplitHostPort(c.Metrics); c.Metrics != "" && (err != nil || port == "") {
		return c, prof, fmt.Errorf("--metrics %q: want HOST:PORT", c.Metrics)
	}
	if t := c.Telemetry; t != "" && t != "-" && !strings.HasPrefix(t, "http://") && !strings.HasPrefix(t, "https://") {
		return c, prof, fmt.Errorf("--telemetry %q: want an http(s) URL or -", t)
	}
	if err := edge.CheckBusFlags(&c); err != nil {
		return c, prof, err
	}
	c.Token = os.Getenv("TAILOR_TOKEN")
	return c, prof, nil
}

// cpuProfileHz is the --cpuprofile sampling rate: 100 Hz (the default)
// gives too few samples to compare two modes that differ by a few µs per
// connection.
const cpuProfileHz = 500

// startCPUProfile starts profiling into path; the returned stop writes it.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	runtime.SetCPUProfileRate(cpuProfileHz) // StartCPUProfile then keeps this rate (it logs that it cannot change it)
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "usage: tailor-edge --listen HOST:PORT --root DIR [--upstream URL] [--cert F --key F | --self-signed]")
	fmt.Fprintln(w, "                   [--table PATH_OR_URL] [--telemetry URL|-] [--quic] [--device-map F]")
	fmt.Fprintln(w, "                   [--metrics HOST:PORT] [--geoip-asn F] [--geoip-region F] ...")
	fmt.Fprintln(w, "       tailor-edge ... --bus nats://HOST:PORT --table-pubkey F [--bus-user U --bus-password-file F] [--bus-ca F] [--pop NAME] [--table-cache DIR]")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func run(cfg edge.Config, prof string) error {
	s, err := edge.New(cfg)
	if err != nil {
		return err
	}
	if prof != "" {
		stop, err := startCPUProfile(prof)
		if err != nil {
			return err
		}
		defer func() { _ = stop() }()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	// the handler first: a SIGTERM right after the "serving" line (a supervisor, a test) must flush, not kill
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	log.Printf("tailor-edge: serving https://%s table version %d", ln.Addr(), s.Plan().Table.Version)
	if cfg.QUIC {
		log.Printf("tailor-edge: HTTP/3 over QUIC on udp %s", ln.Addr())
	}
	if a := s.MetricsAddr(); a != "" {
		log.Printf("tailor-edge: metrics on http://%s/metrics", a)
	}
	closed := make(chan error, 1)
	go func() {
		<-sig
		closed <- s.Close() // flushes telemetry before main returns
	}()
	if err := s.Serve(ln); err != nil {
		return err
	}
	err = <-closed
	log.Printf("tailor-edge: stopped: %v", s.Stats())
	return err
}
