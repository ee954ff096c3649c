// Package edge is tailor-edge: an HTTPS server (static files, reverse proxy,
// HTTP/1.1 and HTTP/2) that picks a decision-table configuration per
// connection inside the TLS handshake and applies it: the ALPN list (HTTP
// version), the HTTP/2 SETTINGS and the setsockopt transport knobs.
package edge

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Sentinel errors; wrapped with a short lowercase prefix.
var (
	ErrConfig = errors.New("edge config")
	ErrTable  = errors.New("edge table")
	ErrSocket = errors.New("edge socket")
)

// Config is the command line of tailor-edge.
type Config struct {
	Listen       string        // HOST:PORT; default "127.0.0.1:8443"
	Root         string        // static file directory; required without Upstream
	Upstream     string        // reverse-proxy URL for paths not in Root; default "" (none)
	CertFile     string        // PEM certificate; default "" (then SelfSigned is required)
	KeyFile      string        // PEM key; default ""
	SelfSigned   bool          // generate an in-memory certificate for localhost; default false
	Table        string        // decision table path or http(s) URL; default "" (all-default config)
	Poll         time.Duration // table re-read period; default 5s
	Telemetry    string        // telemetry URL, "-" for stdout JSON lines, "" for none; default ""
	Token        string        // bearer token for a telemetry URL; default "" (from TAILOR_TOKEN in main)
	TelemetryOut io.Writer     // where Telemetry "-" writes JSON lines; default os.Stdout
	Flush        time.Duration // telemetry flush period; default 2s
	Source       string        // telemetry source id; default "tailor-edge"
	ApplySocket  bool          // apply setsockopt knobs per connection; default true (set in main)
	InjectBeacon bool          // append the Navigation Timing beacon to HTML; default false
	FullAddress  bool          // report client_addr as well as the prefix; default false
	QUIC         bool          // also serve HTTP/3 on the same UDP port; default false
	DeviceMap    string        // JA4 -> device class file; default "" (every device "unknown")
	Static       bool          // no per-connection selection: every connection gets the table default (benchmark baseline); default false
	ConnRecords  bool          // with Telemetry, one "connection" record per TCP/QUIC connection at close; default true (set in main)

	ReadHeaderTimeout time.Duration // request headers (and the TLS handshake); default 10s
	ReadTimeout       time.Duration // a whole request, body included; default 60s
	WriteTimeout      time.Duration // per write: a response write that makes no progress for this long cuts the connection; default 60s
	IdleTimeout       time.Duration // keep-alive; default 120s
	UpstreamTimeout   time.Duration // --upstream: dial, TLS handshake and response headers each; default 30s (then 504)

	TelemetryBufferBytes int    // telemetry buffer bound in estimated encoded bytes; default 16 MiB
	TablePubKey          string // PEM file of Ed25519 public keys; tables must be signed by one. Default "" (unsigned accepted, warned)
	ManagerCA            string // PEM CA bundle for https:// table and telemetry URLs; default "" (system roots)
	MaxHeaderBytes       int    // HTTP/1 header bound; default 64 KiB (HTTP/2: see max_header_list_size)
	MaxBeaconBytes       int64  // beacon body bound; default 16 KiB

	Metrics     string // HOST:PORT of the read-only Prometheus /metrics listener; default "" (off)
	GeoIPASN    string // MaxMind-format ASN database (GeoLite2-ASN); default "" (no asn in telemetry)
	GeoIPRegion string // MaxMind-format City or Country database; default "" (no region in telemetry)

	Bus             string // --bus nats://HOST:PORT[,...]: tables and telemetry over NATS JetStream (docs/bus.md); default "" (HTTP)
	BusUser         string // --bus-user; default "" (no authentication)
	BusPasswordFile string // --bus-password-file; default ""
	BusCA           string // --bus-ca: PEM CA certificate(s) of the bus servers; TLS required and verified; default "" (tls:// URLs: system roots)
	Pop             string // --pop: telemetry subject tailor.tel.<pop>.<partition>; default "default"
	TableCache      string // --table-cache DIR: last good tables, loaded at start before the bus or manager answers; default "" (none)
}

func (c *Config) withDefaults() Config {
	d := *c
	set := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	set(&d.Poll, 5*time.Second)
	set(&d.Flush, 2*time.Second)
	set(&d.ReadHeaderTimeout, 10*time.Second)
	set(&d.IdleTimeout, 120*time.Second)
	set(&d.ReadTimeout, 60*time.Second)
	set(&d.WriteTimeout, 60*time.Second)
	set(&d.UpstreamTimeout, 30*time.Second)
	if d.Listen == "" {
		d.Listen = "127.0.0.1:8443"
	}
	if d.Source == "" {
		d.Source = "tailor-edge"
	}
	if d.Pop == "" {
		d.Pop = bus.DefaultPop
	}
	if d.MaxHeaderBytes <= 0 {
		d.MaxHeaderBytes = 64 << 10
	}
	if d.MaxBeaconBytes <= 0 {
		d.MaxBeaconBytes = 16 << 10
	}
	return d
}

func (c *Config) check() error {
	switch {
	case c.Root == "" && c.Upstream == "":
		return fmt.Errorf("%w: --root or --upstream is required", ErrConfig)
	case c.SelfSigned == (c.CertFile != ""):
		return fmt.Errorf("%w: give either --cert/--key or --self-signed", ErrConfig)
	case (c.CertFile == "") != (c.KeyFile == ""):
		return fmt.Errorf("%w: --cert and --key go together", ErrConfig)
	}
	if err := telemetry.CheckSource(c.Source); err != nil {
		return fmt.Errorf("%w: telemetry source: %v", ErrConfig, err)
	}
	return c.checkBus()
}

// CheckBusFlags checks the --bus flags of a command line (one error
// naming the flag, without the "edge config" prefix).
func CheckBusFlags(c *Config) error {
	d := c.withDefaults()
	if err := d.checkBus(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), ErrConfig.Error()+": "))
	}
	return nil
}

// checkBus: the --bus flags go together (one error naming the flag).
func (c *Config) checkBus() error {
	if c.Bus == "" {
		for flag, v := range map[string]string{"--bus-user": c.BusUser, "--bus-password-file": c.BusPasswordFile, "--bus-ca": c.BusCA} {
			if v != "" {
				return fmt.Errorf("%w: %s needs --bus", ErrConfig, flag)
			}
		}
		if c.Pop != bus.DefaultPop {
			return fmt.Errorf("%w: --pop needs --bus", ErrConfig)
		}
		return nil
	}
	if _, err := bus.CheckURLs(c.Bus); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch {
	case c.Table != "" || c.Telemetry != "":
		return fmt.Errorf("%w: --bus carries the tables and the telemetry: not with --table or --telemetry", ErrConfig)
	case c.TablePubKey == "":
		return fmt.Errorf("%w: --table-pubkey is required with --bus (tables from the bus must be signed)", ErrConfig)
	case c.BusUser != "" && c.BusPasswordFile == "":
		return fmt.Errorf("%w: --bus-user needs --bus-password-file", ErrConfig)
	case c.BusUser == "" && c.BusPasswordFile != "":
		return fmt.Errorf("%w: --bus-password-file needs --bus-user", ErrConfig)
	}
	if err := bus.CheckPop(c.Pop); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return nil
}
