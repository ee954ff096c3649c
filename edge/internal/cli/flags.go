package cli

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/tailor-project/tailor/edge/internal/config"
)

// optFloat, optInt, optUint and optString set a config pointer when the
// flag is given, so "given as 0" differs from "not given".
type optFloat struct{ p **float64 }

func (o optFloat) String() string { return "" }
func (o optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("not a number: %q", s)
	}
	*o.p = &v
	return nil
}

type optInt struct{ p **int }

func (o optInt) String() string { return "" }
func (o optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	*o.p = &v
	return nil
}

type optUint struct{ p **uint64 }

func (o optUint) String() string { return "" }
func (o optUint) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not an unsigned integer: %q", s)
	}
	*o.p = &v
	return nil
}

type optString struct{ p **string }

func (o optString) String() string     { return "" }
func (o optString) Set(s string) error { *o.p = &s; return nil }

// linkFlags binds every link setting of f to fs.
func linkFlags(fs *flag.FlagSet, f *config.File) {
	fs.String("config", "", "JSON config file (flags override it)")
	for _, d := range []struct {
		name string
		dir  *config.Dir
	}{{"down", &f.Down}, {"up", &f.Up}} {
		dirFlags(fs, d.name, d.dir)
	}
	fs.Var(optFloat{&f.DelayMS}, "delay", "one-way delay in ms, both directions (default 0)")
	fs.Var(optInt{&f.QueuePackets}, "queue-packets", "droptail limit in packets, both directions (default 1000)")
	fs.Var(optInt{&f.QueueBytes}, "queue-bytes", "droptail limit in bytes, both directions (default none)")
	fs.Var(optUint{&f.Seed}, "seed", "loss RNG seed (default 1)")
	fs.StringVar(&f.Stats, "stats", f.Stats, "write JSON statistics to this file at exit")
	fs.StringVar(&f.SrvIP, "srv-ip", f.SrvIP, "server TUN address (default "+config.DefaultSrvIP+")")
	fs.StringVar(&f.CliIP, "cli-ip", f.CliIP, "client TUN address (default "+config.DefaultCliIP+")")
	fs.StringVar(&f.SrvDev, "srv-dev", f.SrvDev, "server TUN device (default "+config.DefaultSrvDev+")")
	fs.StringVar(&f.CliDev, "cli-dev", f.CliDev, "client TUN device (default "+config.DefaultCliDev+")")
	fs.StringVar(&f.RouteOpts, "route-opts", f.RouteOpts, "appended to the server's route to the client, e.g. 'initcwnd 10 congctl cubic'")
	fs.Var(optInt{&f.MTU}, "mtu", "TUN MTU (default 1500)")
	fs.Var(optInt{&f.FIFOPrio}, "fifo-prio", "SCHED_FIFO priority of the link thread, 0 = off (default 50)")
	fs.BoolVar(&f.TraceFromFirstPacket, "trace-from-first-packet", f.TraceFromFirstPacket, "start trace clocks at the first packet (default: at link start)")
}

func dirFlags(fs *flag.FlagSet, name string, d *config.Dir) {
	what := map[string]string{"down": "server→client", "up": "client→server"}[name]
	fs.Var(optFloat{&d.RateMbit}, name+"-rate-mbit", what+" rate in Mbit/s (default unlimited)")
	fs.Var(optString{&d.Trace}, name+"-trace", what+" mahimahi trace file")
	fs.Var(optFloat{&d.DelayMS}, name+"-delay", what+" one-way delay in ms (default --delay)")
	fs.Var(optFloat{&d.Loss}, name+"-loss", what+" i.i.d. loss fraction in [0,1) (default 0)")
	fs.Var(optInt{&d.QueuePackets}, name+"-queue-packets", what+" droptail limit in packets")
	fs.Var(optInt{&d.QueueBytes}, name+"-queue-bytes", what+" droptail limit in bytes")
}

// configPath finds --config/-config in args before the full parse, so the
// file is loaded first and flags override it.
func configPath(args []string) string {
	for i, a := range args {
		for _, p := range []string{"-config", "--config"} {
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
			if len(a) > len(p)+1 && a[:len(p)+1] == p+"=" {
				return a[len(p)+1:]
			}
		}
	}
	return ""
}
