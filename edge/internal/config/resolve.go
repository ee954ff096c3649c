package config

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/tailor-project/tailor/edge/internal/link"
)

// Defaults, see the field comments in File.
const (
	DefaultSrvIP        = "10.231.0.1"
	DefaultCliIP        = "10.231.0.2"
	DefaultSrvDev       = "tl-s"
	DefaultCliDev       = "tl-c"
	DefaultMTU          = 1500
	DefaultFIFOPrio     = 50
	DefaultQueuePackets = 1000
	DefaultSeed         = 1
)

// Config is a validated configuration.
type Config struct {
	Down, Up       link.Params
	Seed           uint64
	Stats          string
	SrvNS, CliNS   string
	SrvIP, CliIP   netip.Addr
	SrvDev, CliDev string
	RouteOpts      []string
	MTU            int
	FIFOPrio       int
}

// Resolve validates f and fills defaults. needNS is false in run mode,
// where the harness names the namespaces.
func Resolve(f *File, needNS bool) (*Config, error) {
	c := &Config{Seed: deref(f.Seed, DefaultSeed), Stats: f.Stats,
		SrvNS: f.SrvNS, CliNS: f.CliNS, RouteOpts: strings.Fields(f.RouteOpts)}
	var err error
	if c.Down, err = resolveDir("down", &f.Down, f); err != nil {
		return nil, err
	}
	if c.Up, err = resolveDir("up", &f.Up, f); err != nil {
		return nil, err
	}
	if err := resolveHost(c, f, needNS); err != nil {
		return nil, err
	}
	return c, nil
}

func resolveHost(c *Config, f *File, needNS bool) error {
	if needNS && (f.SrvNS == "" || f.CliNS == "") {
		return invalid("srv_ns/cli_ns", "--srv-ns/--cli-ns", "both namespaces are required")
	}
	var err error
	if c.SrvIP, err = addr("srv_ip", "--srv-ip", f.SrvIP, DefaultSrvIP); err != nil {
		return err
	}
	if c.CliIP, err = addr("cli_ip", "--cli-ip", f.CliIP, DefaultCliIP); err != nil {
		return err
	}
	if c.SrvIP == c.CliIP {
		return invalid("cli_ip", "--cli-ip", "must differ from srv_ip")
	}
	if c.SrvDev, err = devName("srv_dev", "--srv-dev", f.SrvDev, DefaultSrvDev); err != nil {
		return err
	}
	if c.CliDev, err = devName("cli_dev", "--cli-dev", f.CliDev, DefaultCliDev); err != nil {
		return err
	}
	return resolveNumbers(c, f)
}

func resolveNumbers(c *Config, f *File) error {
	c.MTU = deref(f.MTU, DefaultMTU)
	if c.MTU < 576 || c.MTU > 9000 {
		return invalid("mtu", "--mtu", fmt.Sprintf("must be in [576, 9000], got %d", c.MTU))
	}
	c.FIFOPrio = deref(f.FIFOPrio, DefaultFIFOPrio)
	if c.FIFOPrio < 0 || c.FIFOPrio > 99 {
		return invalid("fifo_prio", "--fifo-prio", fmt.Sprintf("must be in [0, 99], got %d", c.FIFOPrio))
	}
	for _, d := range []*link.Params{&c.Down, &c.Up} {
		if d.QueueBytes > 0 && d.QueueBytes < c.MTU {
			return invalid("queue_bytes", "--queue-bytes", fmt.Sprintf("%d is smaller than the MTU %d", d.QueueBytes, c.MTU))
		}
	}
	return nil
}

func invalid(field, flag, why string) error {
	return fmt.Errorf("%w: %s (%s): %s", ErrInvalid, field, flag, why)
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func addr(field, flag, s, def string) (netip.Addr, error) {
	if s == "" {
		s = def
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return a, invalid(field, flag, fmt.Sprintf("%q is not an IPv4 address", s))
	}
	return a, nil
}

func devName(field, flag, s, def string) (string, error) {
	if s == "" {
		s = def
	}
	if len(s) > 15 || strings.ContainsAny(s, "/ \t\n:") {
		return s, invalid(field, flag, fmt.Sprintf("%q is not a valid interface name (max 15 chars)", s))
	}
	return s, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
