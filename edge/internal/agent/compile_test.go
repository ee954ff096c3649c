package agent

import (
	"errors"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/bpf"

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
	g := sockopsGroup(rules.CompiledGroup{Configs: []int{3, 5}, P: []float64{0.5625, 0.4375}, PHeld: 0.4375,
		Cum: rules.Thresholds([]float64{0.75, 0.25})})
	if g.N != 2 || g.Cum[0] != 3<<30 || g.Cum[1] != 1<<32 || g.Cfg[1] != 5 || g.P_nano[0] != 562500000 ||
		g.P_nano[1] != 437500000 || g.P_nanoHeld != 437500000 {
		t.Fatalf("group %+v", g)
	}
	// floor, not round: floor(0.1 x 2^32) = 429496729 (round: ...730), 0.1+0.2 = 0.30000000000000004 -> 1288490188 (round: ...189)
	g = sockopsGroup(rules.CompiledGroup{Configs: []int{0, 1, 2}, P: []float64{0.1, 0.2, 0.7}, Cum: rules.Thresholds([]float64{0.1, 0.2, 0.7})})
	if g.Cum[0] != 429496729 || g.Cum[1] != 1288490188 || g.Cum[2] != 1<<32 {
		t.Fatalf("thresholds %v, want floor(cum x 2^32) with the last 2^32", g.Cum)
	}
}

// TestKnobBitsMatchEnum: knobBits names every value of enum knob once, and
// the generated enums (bpf2go -type knob -type counter) are those of
// sockops.bpf.c as it is now (a stale `go generate` would shift indexes).
func TestKnobBitsMatchEnum(t *testing.T) {
	seen := make([]string, numKnobs)
	for name, bit := range knobBits {
		if int(bit) >= numKnobs || seen[bit] != "" {
			t.Fatalf("knob %s: bit %d out of range or shared with %q", name, bit, seen[min(int(bit), numKnobs-1)])
		}
		seen[bit] = name
	}
	if len(knobBits) != numKnobs {
		t.Fatalf("%d knobs mapped, enum knob has %d", len(knobBits), numKnobs)
	}
	src, err := os.ReadFile("../bpf/sockops.bpf.c")
	if err != nil {
		t.Fatal(err)
	}
	knob := cEnum(t, string(src), "knob", nil)
	counter := cEnum(t, string(src), "counter", knob)
	gen := map[string]int{
		"K_CC": int(bpf.SockopsKnobK_CC), "K_IW": int(bpf.SockopsKnobK_IW), "K_RTO_MIN": int(bpf.SockopsKnobK_RTO_MIN),
		"K_DELACK_MAX": int(bpf.SockopsKnobK_DELACK_MAX), "K_SNDBUF": int(bpf.SockopsKnobK_SNDBUF), "K_PACING": int(bpf.SockopsKnobK_PACING),
		"K_LOWAT": int(bpf.SockopsKnobK_LOWAT), "K_NODELAY": int(bpf.SockopsKnobK_NODELAY), "K_RTO_MAX": int(bpf.SockopsKnobK_RTO_MAX),
		"K_SYN_RTO": int(bpf.SockopsKnobK_SYN_RTO), "K_RCVBUF": int(bpf.SockopsKnobK_RCVBUF), "K_CWND_CLAMP": int(bpf.SockopsKnobK_CWND_CLAMP),
		"K_NUM":   numKnobs,
		"C_TUNED": cTuned, "C_MISS": cMiss, "C_EVENTS": cEvents, "C_EVENTS_LOST": cEventsLost, "C_STORAGE_FAIL": cStorageFail,
		"C_PENDING_HIT": cPendingHit, "C_HOLDBACK": cHoldback, "C_NUM": cNum,
	}
	if len(knob)+len(counter) != len(gen) {
		t.Errorf("sockops.bpf.c has %d knob and %d counter names, Go uses %d: regenerate (go generate in internal/bpf) and map the new ones",
			len(knob), len(counter), len(gen))
	}
	for _, e := range []map[string]int{knob, counter} {
		for name, v := range e {
			if g, ok := gen[name]; !ok || g != v {
				t.Errorf("%s = %d in sockops.bpf.c, %d (known %v) in Go: regenerate with go generate in internal/bpf", name, v, g, ok)
			}
		}
	}
}

// cEnum reads `enum name { A, B = X, ... };` from C source: names with
// their values (an initialiser may name a value of prev).
func cEnum(t *testing.T, src, name string, prev map[string]int) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`enum ` + name + ` \{([^}]*)\};`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("no enum %s in sockops.bpf.c", name)
	}
	out, v := map[string]int{}, 0
	for _, item := range strings.Split(m[1], ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		id, init, hasInit := strings.Cut(item, "=")
		id, init = strings.TrimSpace(id), strings.TrimSpace(init)
		if hasInit {
			if n, err := strconv.Atoi(init); err == nil {
				v = n
			} else if p, ok := prev[init]; ok {
				v = p
			} else {
				t.Fatalf("enum %s: cannot read initialiser %q", name, init)
			}
		}
		out[id] = v
		v++
	}
	return out
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

// TestSockopsMeta: the meta carries the whole 64-bit table version (the
// cohort draw's arm half hashes all of it; telemetry reports it) and the
// salt key.
func TestSockopsMeta(t *testing.T) {
	c := &rules.Compiled{Version: 1<<40 + 7, HoldThr: 1 << 30, Salted: true, K0: 0x0706050403020100, K1: 0x0f0e0d0c0b0a0908}
	g, err := buildGeneration(c, 250, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := g.meta; m.Version != 1<<40+7 || m.Holdback != 1<<30 || m.Salted != 1 || m.K0 != c.K0 || m.K1 != c.K1 {
		t.Fatalf("meta %+v", m)
	}
}

func TestSockopsConfigBuffersAndClamp(t *testing.T) {
	c := rules.CompiledConfig{ID: "c-0000000001", Knobs: map[string]any{"tcp.congestion_control": "cubic"},
		Set: map[string]any{"tcp.rcvbuf_bytes": int64(65536), "tcp.cwnd_clamp": int64(6), "http.alt_svc": false}}
	v, err := sockopsConfig(c, 250, []string{"cubic"})
	if err != nil {
		t.Fatal(err)
	}
	want := uint32(1<<bpf.SockopsKnobK_CC | 1<<bpf.SockopsKnobK_RCVBUF | 1<<bpf.SockopsKnobK_CWND_CLAMP)
	if v.Rcvbuf != 65536 || v.CwndClamp != 6 || v.SetMask != want {
		t.Fatalf("config %+v, want rcvbuf 65536, clamp 6, mask %#x (http.alt_svc is not a sockops knob)", v, want)
	}
}
