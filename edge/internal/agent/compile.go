package agent

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"

	"github.com/tailor-project/tailor/edge/internal/bpf"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Sizes of the BPF maps (must match sockops.bpf.c).
const (
	maxGroups   = 4096
	maxConfigs  = 1024
	maxPrefixes = 262144
	groupNone   = math.MaxUint32
)

// Knob bit positions in config.set_mask and apply-error counter indexes:
// enum knob in sockops.bpf.c, read from the generated bindings.
var knobBits = map[string]uint32{
	"tcp.congestion_control":  uint32(bpf.SockopsKnobK_CC),
	"tcp.initial_cwnd":        uint32(bpf.SockopsKnobK_IW),
	"tcp.rto_min_ms":          uint32(bpf.SockopsKnobK_RTO_MIN),
	"tcp.delack_max_ms":       uint32(bpf.SockopsKnobK_DELACK_MAX),
	"tcp.sndbuf_bytes":        uint32(bpf.SockopsKnobK_SNDBUF),
	"tcp.max_pacing_rate_bps": uint32(bpf.SockopsKnobK_PACING),
	"tcp.notsent_lowat_bytes": uint32(bpf.SockopsKnobK_LOWAT),
	"tcp.nodelay":             uint32(bpf.SockopsKnobK_NODELAY),
	"tcp.rto_max_ms":          uint32(bpf.SockopsKnobK_RTO_MAX),
	"tcp.syn_rto_ms":          uint32(bpf.SockopsKnobK_SYN_RTO),
	"tcp.rcvbuf_bytes":        uint32(bpf.SockopsKnobK_RCVBUF),
	"tcp.cwnd_clamp":          uint32(bpf.SockopsKnobK_CWND_CLAMP),
}

// numKnobs is K_NUM: the knobs the program applies (TestKnobBitsMatchEnum
// checks knobBits covers each exactly once).
const numKnobs = int(bpf.SockopsKnobK_NUM)

// KnobNames lists the sock_ops knobs by counter index.
var KnobNames = func() []string {
	out := make([]string, numKnobs)
	for name, bit := range knobBits {
		out[bit] = name
	}
	return out
}()

// generation is a compiled table as BPF map values.
type generation struct {
	meta     bpf.SockopsMeta
	configs  []bpf.SockopsConfig
	groups   []bpf.SockopsGroup
	keys     []bpf.SockopsLpmKey
	values   []uint32
	compiled *rules.Compiled
}

// buildGeneration converts a compiled table; hz converts the SYN RTO to jiffies.
func buildGeneration(c *rules.Compiled, hz int, available []string) (*generation, error) {
	if len(c.Configs) > maxConfigs || len(c.Groups) > maxGroups || len(c.Prefixes) > maxPrefixes-1 {
		return nil, &UnsupportedError{Feature: fmt.Sprintf("table with %d configs, %d groups, %d prefixes (limits %d, %d, %d)",
			len(c.Configs), len(c.Groups), len(c.Prefixes), maxConfigs, maxGroups, maxPrefixes-1)}
	}
	g := &generation{compiled: c}
	g.meta = bpf.SockopsMeta{Version: uint64(c.Version), Holdback: c.HoldThr, DefaultCfg: uint32(c.Default),
		K0: c.K0, K1: c.K1, Salted: b2u(c.Salted)}
	for i, cfg := range c.Configs {
		v, err := sockopsConfig(cfg, hz, available)
		if err != nil {
			return nil, fmt.Errorf("decision table field configs.%s: %w", c.Configs[i].ID, err)
		}
		g.configs = append(g.configs, v)
		if v.SetMask&(1<<knobBits["tcp.syn_rto_ms"]) != 0 {
			g.meta.SynRtoAny = 1
		}
	}
	for _, grp := range c.Groups {
		g.groups = append(g.groups, sockopsGroup(grp))
	}
	g.keys, g.values = lpmEntries(c.Prefixes)
	return g, nil
}

func sockopsConfig(c rules.CompiledConfig, hz int, available []string) (bpf.SockopsConfig, error) {
	var v bpf.SockopsConfig
	id, err := strconv.ParseUint(c.ID[2:], 16, 64)
	if err != nil {
		return v, err
	}
	v.Id40 = id
	cc := c.Knobs["tcp.congestion_control"].(string)
	if err := checkCC(cc, available); err != nil {
		return v, err
	}
	for i := 0; i < len(cc) && i < 15; i++ {
		v.Cc[i] = int8(cc[i])
	}
	v.SetMask = 1 << knobBits["tcp.congestion_control"] // always: Tailor's default (cubic) may differ from the host's
	for name, val := range c.Set {
		bit, ok := knobBits[name]
		if !ok {
			continue // not a sockops knob (HTTP, QUIC, ...)
		}
		v.SetMask |= 1 << bit
		setKnob(&v, name, val, hz)
	}
	return v, nil
}

func setKnob(v *bpf.SockopsConfig, name string, val any, hz int) {
	n, _ := knobs.Int(val)
	switch name {
	case "tcp.initial_cwnd":
		v.Iw = uint32(n)
	case "tcp.rto_min_ms":
		v.RtoMinUs = uint32(n * 1000)
	case "tcp.delack_max_ms":
		v.DelackMaxUs = uint32(n * 1000)
	case "tcp.rto_max_ms":
		v.RtoMaxMs = uint32(n)
	case "tcp.syn_rto_ms":
		v.SynRtoJiffies = uint32((n*int64(hz) + 999) / 1000)
	case "tcp.sndbuf_bytes":
		v.Sndbuf = uint32(n)
	case "tcp.rcvbuf_bytes":
		v.Rcvbuf = uint32(n)
	case "tcp.cwnd_clamp":
		v.CwndClamp = uint32(n)
	case "tcp.max_pacing_rate_bps":
		v.Pacing = uint32(n)
	case "tcp.notsent_lowat_bytes":
		v.Lowat = uint32(n)
	case "tcp.nodelay":
		if b, _ := val.(bool); b {
			v.Nodelay = 1
		}
	}
}

// sockopsGroup is a compiled group as the program reads it: the
// thresholds of rules.Thresholds (the last one 2^32, which changes no pick:
// the program, like rules.Pick, takes the last choice when none qualifies)
// and the logged probabilities of rules.PlanGroup in fixed point,
// round(p x 1e9) (spec/decision.md).
func sockopsGroup(g rules.CompiledGroup) bpf.SockopsGroup {
	var v bpf.SockopsGroup
	v.N = uint32(len(g.Configs))
	for i := range g.Configs {
		v.Cum[i] = g.Cum[i]
		v.Cfg[i] = uint32(g.Configs[i])
		v.P_nano[i] = pNano(g.P[i])
	}
	v.Cum[v.N-1] = 1 << 32
	v.P_nanoHeld = pNano(g.PHeld)
	return v
}

// pNano is p x 1e9 rounded to the nearest integer.
func pNano(p float64) uint32 { return uint32(math.Round(p * 1e9)) }

// v4Space is ::ffff:0:0/96, where IPv4 clients live in the 16-byte trie.
var v4Space = netip.MustParsePrefix("::ffff:0:0/96")

// lpmEntries maps prefixes to trie keys. IPv4 is stored v4-mapped; a
// ::ffff:0:0/96 catch-all (-> default) keeps IPv6 rules such as ::/0 from
// matching IPv4 clients unless the table has its own 0.0.0.0/0.
func lpmEntries(ps []rules.PrefixEntry) ([]bpf.SockopsLpmKey, []uint32) {
	var keys []bpf.SockopsLpmKey
	var vals []uint32
	hasV4Default := false
	for _, p := range ps {
		if !p.Prefix.Addr().Is4() && v4Space.Overlaps(p.Prefix) && p.Prefix.Bits() >= 96 {
			continue // an IPv6 rule inside ::ffff:0:0/96 would capture IPv4 clients
		}
		keys = append(keys, lpmKey(p.Prefix))
		vals = append(vals, uint32(p.Group))
		hasV4Default = hasV4Default || (p.Prefix.Addr().Is4() && p.Prefix.Bits() == 0)
	}
	if !hasV4Default {
		keys = append(keys, lpmKey(v4Space))
		vals = append(vals, groupNone)
	}
	return keys, vals
}

func lpmKey(p netip.Prefix) bpf.SockopsLpmKey {
	k := bpf.SockopsLpmKey{Prefixlen: uint32(p.Bits())}
	if p.Addr().Is4() {
		k.Prefixlen += 96
	}
	k.Addr = netip.AddrFrom16(p.Addr().As16()).As16()
	return k
}
