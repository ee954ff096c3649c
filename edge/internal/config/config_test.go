package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveErrors(t *testing.T) {
	good := writeFile(t, "good.tr", "1\n2\n")
	bad := writeFile(t, "bad.tr", "1\n3\n2\n")
	empty := writeFile(t, "empty.tr", "")
	cases := []struct {
		name string
		f    File
		want string
	}{
		{"negative delay", File{DelayMS: ptr(-1.0)}, "down.delay_ms (--delay/--down-delay): must be in [0, 60000] ms, got -1"},
		{"negative up delay", File{Up: Dir{DelayMS: ptr(-5.0)}}, "up.delay_ms"},
		{"rate zero", File{Down: Dir{RateMbit: ptr(0.0)}}, "down.rate_mbit (--down-rate-mbit): must be > 0"},
		{"rate negative", File{Up: Dir{RateMbit: ptr(-3.0)}}, "up.rate_mbit"},
		{"loss one", File{Down: Dir{Loss: ptr(1.0)}}, "down.loss (--down-loss): must be in [0, 1), got 1"},
		{"loss negative", File{Up: Dir{Loss: ptr(-0.1)}}, "up.loss"},
		{"rate and trace", File{Down: Dir{RateMbit: ptr(1.0), Trace: &good}}, "either a rate or a trace"},
		{"unreadable trace", File{Down: Dir{Trace: ptr("/nonexistent/x")}}, "down.trace (--down-trace): trace: open /nonexistent/x"},
		{"empty trace", File{Up: Dir{Trace: &empty}}, "up.trace (--up-trace): trace: " + empty + ": empty"},
		{"decreasing trace", File{Down: Dir{Trace: &bad}}, bad + ":3: timestamp 2 is less than previous 3"},
		{"queue zero", File{QueuePackets: ptr(0)}, "down.queue_packets (--down-queue-packets): must be in [1, 1000000], got 0"},
		{"queue bytes zero", File{Up: Dir{QueueBytes: ptr(0)}}, "up.queue_bytes"},
		{"queue both", File{QueuePackets: ptr(10), QueueBytes: ptr(20000)}, "set only one of queue_packets and queue_bytes"},
		{"queue bytes below mtu", File{QueueBytes: ptr(1000)}, "queue_bytes (--queue-bytes): 1000 is smaller than the MTU 1500"},
		{"bad ip", File{SrvIP: "10.0.0"}, "srv_ip (--srv-ip): \"10.0.0\" is not an IPv4 address"},
		{"same ips", File{SrvIP: "10.1.1.1", CliIP: "10.1.1.1"}, "cli_ip (--cli-ip): must differ"},
		{"long dev", File{SrvDev: "a-very-long-device-name"}, "srv_dev"},
		{"mtu", File{MTU: ptr(100)}, "mtu (--mtu)"},
		{"fifo", File{FIFOPrio: ptr(120)}, "fifo_prio"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(&c.f, false)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant ErrInvalid containing %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "invalid config: ") {
				t.Fatalf("err %q lacks the sentinel prefix", err)
			}
		})
	}
}

func TestResolveNeedsNamespaces(t *testing.T) {
	if _, err := Resolve(&File{SrvNS: "a"}, true); err == nil || !strings.Contains(err.Error(), "srv_ns/cli_ns") {
		t.Fatalf("err = %v", err)
	}
}

func TestResolveDefaultsAndOverrides(t *testing.T) {
	tr := writeFile(t, "t.tr", "0\n5\n10\n")
	c, err := Resolve(&File{DelayMS: ptr(20.0), QueueBytes: ptr(30000), RouteOpts: "initcwnd 10  congctl cubic",
		Down: Dir{Trace: &tr, Loss: ptr(0.01)}, Up: Dir{RateMbit: ptr(2.5), DelayMS: ptr(5.0), QueuePackets: ptr(7)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	d, u := c.Down, c.Up
	if d.DelayNs != 20e6 || d.Loss != 0.01 || d.Trace == nil || d.QueueBytes != 30000 || d.QueuePackets != 0 {
		t.Errorf("down %+v", d)
	}
	if u.DelayNs != 5e6 || u.RateBps != 2_500_000 || u.QueuePackets != 7 || u.QueueBytes != 0 {
		t.Errorf("up %+v", u)
	}
	if c.SrvIP.String() != DefaultSrvIP || c.CliIP.String() != DefaultCliIP || c.MTU != 1500 ||
		c.FIFOPrio != 50 || c.Seed != 1 || strings.Join(c.RouteOpts, ",") != "initcwnd,10,congctl,cubic" {
		t.Errorf("defaults %+v", c)
	}
	c, _ = Resolve(&File{}, false)
	if c.Down.QueuePackets != DefaultQueuePackets || c.Down.RateBps != 0 || c.Down.Trace != nil {
		t.Errorf("zero config %+v", c.Down)
	}
}

func TestLoad(t *testing.T) {
	var f File
	p := writeFile(t, "c.json", `{"delay_ms": 25, "down": {"rate_mbit": 10}, "up": {"loss": 0.02}, "seed": 9}`)
	if err := Load(p, &f); err != nil {
		t.Fatal(err)
	}
	if *f.DelayMS != 25 || *f.Down.RateMbit != 10 || *f.Up.Loss != 0.02 || *f.Seed != 9 {
		t.Fatalf("loaded %+v", f)
	}
	for name, text := range map[string]string{"unknown": `{"dealy_ms": 1}`, "syntax": `{"delay_ms": }`} {
		if err := Load(writeFile(t, name, text), &File{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if err := Load("/nonexistent.json", &File{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("missing: err = %v", err)
	}
}
