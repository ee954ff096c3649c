package rules

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"sort"
)

// This file is spec/decision.md, the one decision rule: what a connection
// gets from a decision table. tailor-edge applies it with Resolver.Decide;
// tailor-agent compiles a table into the sock_ops program's maps with the
// same pieces (Compile: PlanGroup, HoldbackThreshold, SaltKey), and the
// program computes CohortDraw/HeldBack/Pick in integers. The Python
// reference is tailor.table.decide; the shared vectors are
// spec/vectors/decision-table/decide.json.

// Conn is what a resolver knows about a connection. Empty SNI/Device mean
// "not known" (the TCP layer never knows them).
type Conn struct {
	Addr   netip.Addr
	SNI    string
	Device string
}

// Decision is what a connection gets (spec/decision.md, Outputs).
type Decision struct {
	Group    string  // "" when no rule matched; set for held-back connections too
	Config   string  // the applied configuration
	P        float64 // marginal probability of Config for this context, over the draw
	Holdback bool    // the client's holdback flag (drawn for every client, matched or not)
}

// two32 is 2^32 as a float64 (exact).
const two32 = 1 << 32

// SipHash24 is SipHash-2-4 (Aumasson and Bernstein, 2012) of msg under the
// key (k0, k1): the little-endian 64-bit integers of key bytes 0-7 and 8-15.
func SipHash24(k0, k1 uint64, msg []byte) uint64 {
	v0, v1 := k0^0x736f6d6570736575, k1^0x646f72616e646f6d
	v2, v3 := k0^0x6c7967656e657261, k1^0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13) ^ v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16) ^ v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21) ^ v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17) ^ v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	block := func(m uint64) {
		v3 ^= m
		round()
		round()
		v0 ^= m
	}
	end := len(msg) - len(msg)%8
	for i := 0; i < end; i += 8 {
		block(binary.LittleEndian.Uint64(msg[i:]))
	}
	var tail [8]byte
	copy(tail[:], msg[end:])
	block(binary.LittleEndian.Uint64(tail[:]) | uint64(len(msg)&0xff)<<56)
	v2 ^= 0xff
	for range 4 {
		round()
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// SaltKey is the SipHash key of a table's salt (32 hex digits): k0 and k1
// are the little-endian integers of bytes 0-7 and 8-15. ok is false for a
// salt that is not 16 bytes of hex (the schema refuses those).
func SaltKey(salt string) (k0, k1 uint64, ok bool) {
	b, err := hex.DecodeString(salt)
	if err != nil || len(b) != 16 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]), true
}

// ClientAddr is the client of a: an IPv4-mapped IPv6 address is its IPv4
// address (the zone is dropped).
func ClientAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// CohortUnit is the 16 bytes a client's cohort is hashed from: an IPv4
// client's IPv4-mapped address, an IPv6 client's /64 (then 8 zero bytes).
func CohortUnit(a netip.Addr) [16]byte {
	a = ClientAddr(a)
	u := a.As16() // IPv4: ::ffff:a.b.c.d
	if !a.Is4() {
		clear(u[8:])
	}
	return u
}

// CohortDraw is the client's 64-bit draw under the salt key (k0, k1) in
// table version: the high half (holdback) is SipHash(salt, unit)'s, the
// same for as long as the salt stands; the low half (the configuration)
// is SipHash(salt, unit || version as 8 bytes little-endian)'s, the same
// for every connection of the client in this table, re-drawn by the next.
func CohortDraw(k0, k1 uint64, a netip.Addr, version int64) uint64 {
	var msg [24]byte
	u := CohortUnit(a)
	copy(msg[:], u[:])
	binary.LittleEndian.PutUint64(msg[16:], uint64(version))
	hold := SipHash24(k0, k1, msg[:16])
	arm := SipHash24(k0, k1, msg[:])
	return hold&0xffffffff00000000 | arm&0xffffffff
}

// HoldbackThreshold is floor(holdback x 2^32) (0 without holdback): a
// client is held back iff its draw's high half is below it.
func HoldbackThreshold(holdback float64) uint32 {
	if !(holdback > 0) {
		return 0
	}
	return uint32(math.Floor(holdback * two32)) // holdback < 1: below 2^32
}

// HeldBack is the holdback rule: the draw's high half below the threshold.
func HeldBack(draw uint64, threshold uint32) bool { return uint32(draw>>32) < threshold }

// Thresholds are a group's cumulative thresholds: floor(cum_k x 2^32) with
// cum_k the float64 running sum of the choices' p in table order.
func Thresholds(ps []float64) []uint64 {
	out := make([]uint64, len(ps))
	acc := 0.0
	for i, p := range ps {
		acc += p
		out[i] = uint64(math.Floor(acc * two32))
	}
	return out
}

// Pick is the index of the choice the draw's low half picks: the first k
// with lo < cum[k], the last one when rounding leaves lo uncovered.
func Pick(cum []uint64, draw uint64) int {
	lo := draw & 0xffffffff
	for k, c := range cum {
		if lo < c {
			return k
		}
	}
	return len(cum) - 1
}

// Propensity is the marginal probability of a configuration the group
// gives with probability pi, under holdback h: (1-h)*pi + h*[default].
func Propensity(pi, holdback float64, isDefault bool) float64 {
	add := 0.0
	if isDefault {
		add = holdback
	}
	return float64((1-holdback)*pi) + add // the conversion forbids a fused multiply-add
}

// GroupPlan is a group prepared for the rule: its choices' configurations,
// thresholds, the logged probability of each choice when treated and of
// the default when held back.
type GroupPlan struct {
	ID       string
	Configs  []string  // per choice, table order
	Cum      []uint64  // Thresholds of the choices' p
	PTreated []float64 // per choice: Propensity of its configuration
	PHeld    float64   // Propensity of the default
}

// PlanGroup prepares g of a table whose default is def and holdback h.
func PlanGroup(g Group, def string, holdback float64) GroupPlan {
	gp := GroupPlan{ID: g.ID}
	ps := make([]float64, len(g.Choices))
	pi := map[string]float64{}
	for i, c := range g.Choices {
		gp.Configs = append(gp.Configs, c.Config)
		ps[i] = c.P
		pi[c.Config] += c.P // float64 sum in table order
	}
	gp.Cum = Thresholds(ps)
	for _, id := range gp.Configs {
		gp.PTreated = append(gp.PTreated, Propensity(pi[id], holdback, id == def))
	}
	gp.PHeld = Propensity(pi[def], holdback, true)
	return gp
}

// Resolver applies a validated table to connections (Decide). Longest
// prefix match probes each prefix length present in the table, longest
// first; within a prefix the most specific applicable rule wins.
type Resolver struct {
	table   *Table
	groups  map[string]*GroupPlan
	byNet   map[netip.Prefix][]Rule
	lengths map[bool][]int // is4 -> prefix lengths present, descending
	hold    uint32         // HoldbackThreshold
	salted  bool
	k0, k1  uint64
}

// NewResolver indexes t for Decide.
func NewResolver(t *Table) *Resolver {
	r := &Resolver{table: t, groups: map[string]*GroupPlan{}, byNet: map[netip.Prefix][]Rule{}, lengths: map[bool][]int{},
		hold: HoldbackThreshold(t.Holdback)}
	r.k0, r.k1, r.salted = SaltKey(t.Salt)
	for _, g := range t.Groups {
		gp := PlanGroup(g, t.Default, t.Holdback)
		r.groups[g.ID] = &gp
	}
	for _, rule := range t.Rules {
		if _, seen := r.byNet[rule.Prefix]; !seen {
			is4 := rule.Prefix.Addr().Is4()
			r.lengths[is4] = append(r.lengths[is4], rule.Prefix.Bits())
		}
		r.byNet[rule.Prefix] = append(r.byNet[rule.Prefix], rule)
	}
	for is4, ls := range r.lengths {
		sort.Sort(sort.Reverse(sort.IntSlice(ls)))
		r.lengths[is4] = slices.Compact(ls) // one probe per distinct length
	}
	return r
}

// Salted reports whether draws are per client (the table has a salt); if
// not, Decide uses the caller's per-connection draw.
func (r *Resolver) Salted() bool { return r.salted }

// Decide is spec/decision.md for one connection. draw is a uniform
// per-connection 64-bit integer, used only when the table has no salt.
func (r *Resolver) Decide(c Conn, draw uint64) Decision {
	addr := ClientAddr(c.Addr)
	if r.salted {
		draw = CohortDraw(r.k0, r.k1, addr, r.table.Version)
	}
	hold := HeldBack(draw, r.hold)
	g := r.groups[r.groupOf(addr, c.SNI, c.Device)]
	switch {
	case g == nil:
		return Decision{Config: r.table.Default, P: 1, Holdback: hold}
	case hold:
		return Decision{Group: g.ID, Config: r.table.Default, P: g.PHeld, Holdback: true}
	}
	k := Pick(g.Cum, draw)
	return Decision{Group: g.ID, Config: g.Configs[k], P: g.PTreated[k]}
}

// GroupOf returns the group of the best rule for c, or "".
func (r *Resolver) GroupOf(c Conn) string { return r.groupOf(ClientAddr(c.Addr), c.SNI, c.Device) }

func (r *Resolver) groupOf(addr netip.Addr, sni, device string) string {
	if !addr.IsValid() {
		return ""
	}
	for _, l := range r.lengths[addr.Is4()] {
		p, err := addr.Prefix(l)
		if err != nil {
			continue
		}
		if g, ok := best(r.byNet[p], sni, device); ok {
			return g
		}
	}
	return ""
}

// best is the most specific rule of one prefix that applies: SNI and
// device, then SNI only, then device only, then neither.
func best(rules []Rule, sni, device string) (string, bool) {
	bestRank, group, found := -1, "", false
	for _, rule := range rules {
		if (rule.SNI != nil && *rule.SNI != sni) || (rule.Device != nil && *rule.Device != device) {
			continue
		}
		rank := 0
		if rule.SNI != nil {
			rank += 2
		}
		if rule.Device != nil {
			rank++
		}
		if rank > bestRank {
			bestRank, group, found = rank, rule.Group, true
		}
	}
	return group, found
}
