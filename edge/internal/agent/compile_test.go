package agent

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

func TestEverySockopsKnobIsMapped(t *testing.T) {
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Order {
		if _, ok := knobBits[name]; reg.Knobs[name].AppliesAt("sockops") != ok {
			t.Errorf("knob %s: apply has sockops=%v but the agent maps it=%v", name, !ok, ok)
		}
	}
}

func TestLPMEntries(t *testing.T) {
	cases := []struct {
		name     string
		prefixes []string
		wantLens []uint32 // trie prefix lengths, in order
		wantLast uint32   // value of the last entry
	}{
		{"v4 rule is v4-mapped, catch-all added", []string{"10.0.0.0/8"}, []uint32{104, 96}, groupNone},
		{"v4 default replaces the catch-all", []string{"0.0.0.0/0"}, []uint32{96}, 0},
		{"::/0 cannot capture IPv4 (catch-all)", []string{"::/0"}, []uint32{0, 96}, groupNone},
		{"v6 rule inside ::ffff:0:0/96 is skipped", []string{"::ffff:10.0.0.0/104"}, []uint32{96}, groupNone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ps []rules.PrefixEntry
			for _, p := range c.prefixes {
				ps = append(ps, rules.PrefixEntry{Prefix: netip.MustParsePrefix(p)})
			}
			keys, vals := lpmEntries(ps)
			if len(keys) != len(c.wantLens) || vals[len(vals)-1] != c.wantLast {
				t.Fatalf("keys %v vals %v", keys, vals)
			}
			for i, k := range keys {
				if k.Prefixlen != c.wantLens[i] {
					t.Errorf("key %d prefixlen %d, want %d", i, k.Prefixlen, c.wantLens[i])
				}
			}
		})
	}
	if k := lpmKey(netip.MustParsePrefix("10.1.2.0/24")); k.Addr[10] != 0xff || k.Addr[11] != 0xff || k.Addr[12] != 10 {
		t.Errorf("v4-mapped key bytes %v", k.Addr)
	}
}

func TestSockopsConfig(t *testing.T) {
	c := rules.CompiledConfig{ID: "c-00000000ff", Knobs: map[string]any{"tcp.congestion_control": "reno"},
		Set: map[string]any{"tcp.congestion_control": "reno", "tcp.syn_rto_ms": int64(300), "tcp.rto_min_ms": int64(50), "tcp.nodelay": true, "http.version": "2"}}
	v, err := sockopsConfig(c, 250, []string{"reno", "cubic"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Id40 != 0xff || v.SynRtoJiffies != 75 || v.RtoMinUs != 50000 || v.Nodelay != 1 || v.SetMask != 1|1<<9|1<<2|1<<7 {
		t.Fatalf("config %+v", v)
	}
	c.Knobs["tcp.congestion_control"] = "bbr"
	if _, err := sockopsConfig(c, 250, []string{"reno", "cubic"}); !errors.Is(err, ErrCongestionControl) {
		t.Fatalf("want ErrCongestionControl listing the available ones, got %v", err)
	}
}

func TestSockopsGroupCumulative(t *testing.T) {
	g := sockopsGroup(rules.CompiledGroup{Configs: []int{3, 5}, P: []float64{0.75, 0.25}, Cum: []float64{0.75, 1}})
	if g.N != 2 || g.Cum[0] != 3<<30 || g.Cum[1] != 1<<32 || g.Cfg[1] != 5 || g.P_nano[0] != 750000000 {
		t.Fatalf("group %+v", g)
	}
}

func TestPreflightNotRoot(t *testing.T) {
	if isRoot() {
		t.Skip("runs as root: the not-root error cannot be provoked")
	}
	if _, err := Open(Config{}); !errors.Is(err, ErrNotRoot) {
		t.Fatalf("want ErrNotRoot, got %v", err)
	}
}

func TestKernelHZ(t *testing.T) {
	hz, err := KernelHZ()
	if err != nil {
		t.Skipf("HZ not readable here: %v", err)
	}
	if hz != 100 && hz != 250 && hz != 300 && hz != 1000 {
		t.Fatalf("HZ %d", hz)
	}
}
