package rules

import (
	"net/netip"
	"slices"
	"sort"
)

// Conn is what a resolver knows about a connection. Empty SNI/Device mean
// "not known" (the TCP layer never knows them).
type Conn struct {
	Addr   netip.Addr
	SNI    string
	Device string
}

// Decision is the outcome of a resolution.
type Decision struct {
	Group  string // "" when no rule matched
	Config string
	P      float64
}

// Resolver answers per-connection lookups on a validated table, exactly like
// tailor.table.TableResolver: longest prefix first; within a prefix a rule
// naming the connection's sni/device beats one that leaves them out. An
// IPv4-mapped IPv6 address is IPv6 and never matches IPv4 rules.
type Resolver struct {
	table   *Table
	groups  map[string][]Choice
	byNet   map[netip.Prefix][]Rule
	lengths map[bool][]int // is4 -> prefix lengths present, descending
}

// NewResolver indexes t for lookups.
func NewResolver(t *Table) *Resolver {
	r := &Resolver{table: t, groups: map[string][]Choice{}, byNet: map[netip.Prefix][]Rule{}, lengths: map[bool][]int{}}
	for _, g := range t.Groups {
		r.groups[g.ID] = g.Choices
	}
	seen := map[netip.Prefix]bool{}
	for _, rule := range t.Rules {
		r.byNet[rule.Prefix] = append(r.byNet[rule.Prefix], rule)
		if !seen[rule.Prefix] {
			seen[rule.Prefix] = true
			is4 := rule.Prefix.Addr().Is4()
			r.lengths[is4] = append(r.lengths[is4], rule.Prefix.Bits())
		}
	}
	for is4, ls := range r.lengths {
		sort.Sort(sort.Reverse(sort.IntSlice(ls)))
		r.lengths[is4] = slices.Compact(ls) // one probe per distinct length
	}
	return r
}

// GroupOf returns the group of the best rule for c, or "".
func (r *Resolver) GroupOf(c Conn) string {
	lengths := r.lengths[c.Addr.Is4()]
	for i, l := range lengths {
		if i > 0 && lengths[i-1] == l {
			continue
		}
		p, err := c.Addr.Prefix(l)
		if err != nil {
			continue
		}
		if g, ok := best(r.byNet[p], c); ok {
			return g
		}
	}
	return ""
}

func best(rules []Rule, c Conn) (string, bool) {
	bestRank, group, found := -1, "", false
	for _, rule := range rules {
		if (rule.SNI != nil && *rule.SNI != c.SNI) || (rule.Device != nil && *rule.Device != c.Device) {
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

// Resolve picks c's configuration with u ~ U[0,1): the first choice whose
// cumulative probability exceeds u, the last one if rounding leaves u
// uncovered. Holdback is the caller's draw, as in the Python reference.
func (r *Resolver) Resolve(c Conn, u float64) Decision {
	g := r.GroupOf(c)
	if g == "" {
		return Decision{Config: r.table.Default, P: 1}
	}
	choices := r.groups[g]
	acc := 0.0
	for _, ch := range choices {
		acc += ch.P
		if u < acc {
			return Decision{Group: g, Config: ch.Config, P: ch.P}
		}
	}
	last := choices[len(choices)-1]
	return Decision{Group: g, Config: last.Config, P: last.P}
}
