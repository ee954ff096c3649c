// Command tailor-edge is an HTTPS server that tunes ALPN (HTTP version),
// HTTP/2 SETTINGS and setsockopt transport knobs per connection from a
// Tailor decision table. See README.md.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/tailor-project/tailor/edge/internal/edge"
)

func main() {
	cfg := parseFlags()
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "tailor-edge:", err)
		os.Exit(1)
	}
}

func parseFlags() edge.Config {
	var c edge.Config
	flag.StringVar(&c.Listen, "listen", "127.0.0.1:8443", "HOST:PORT to serve HTTPS on")
	flag.StringVar(&c.Root, "root", "", "directory of static files (required)")
	flag.StringVar(&c.Upstream, "upstream", "", "reverse-proxy URL for paths not under --root")
	flag.StringVar(&c.CertFile, "cert", "", "PEM certificate")
	flag.StringVar(&c.KeyFile, "key", "", "PEM private key")
	flag.BoolVar(&c.SelfSigned, "self-signed", false, "use an in-memory self-signed certificate")
	flag.StringVar(&c.Table, "table", "", "decision table file or http(s) URL (polled with If-None-Match)")
	flag.DurationVar(&c.Poll, "poll", 0, "table poll period (default 5s)")
	flag.StringVar(&c.Telemetry, "telemetry", "", "telemetry URL, or - for JSON lines on stdout")
	flag.BoolVar(&c.ApplySocket, "apply-socket", true, "apply setsockopt knobs per connection")
	flag.BoolVar(&c.InjectBeacon, "inject-beacon", false, "append the page-load beacon script to HTML responses")
	flag.BoolVar(&c.FullAddress, "full-address", false, "report client_addr as well as client_prefix")
	flag.Parse()
	c.Token = os.Getenv("TAILOR_TOKEN")
	return c
}

func run(cfg edge.Config) error {
	s, err := edge.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	log.Printf("tailor-edge: serving https://%s table version %d", ln.Addr(), s.Plan().Table.Version)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	closed := make(chan error, 1)
	go func() {
		<-sig
		closed <- s.Close() // flushes telemetry before main returns
	}()
	if err := s.Serve(ln); err != nil {
		return err
	}
	return <-closed
}
