package rules

import (
	"fmt"
	"maps"
	"slices"
)

// MergePartitions composes the partitions' tables into one table for a
// consumer that applies a single table (tailor-agent with --bus,
// docs/bus.md): the rules of partition p whose prefix is an IPv4 /24 or
// longer (IPv6 /64 or longer) inside partition p (partition(its /24 or
// /64, P) == p), the shorter-prefix rules of partition 0, group ids
// prefixed "p<p>.", the configurations of all, and the default, holdback,
// salt and policy of the lowest partition present (all shards share
// them). Its version is the sum of the partitions' versions, its
// generated_at the latest. nil when parts is empty.
func MergePartitions(P int, parts map[int]*Table, partition func(clientPrefix string, P int) int) (*Table, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	ps := slices.Sorted(maps.Keys(parts))
	base := parts[ps[0]]
	m := &Table{Default: base.Default, Holdback: base.Holdback, Salt: base.Salt, Policy: base.Policy,
		ValidForS: base.ValidForS, Configs: map[string]map[string]any{}}
	for _, p := range ps {
		t := parts[p]
		if p < 0 || p >= P {
			return nil, fmt.Errorf("merge: partition %d out of 0..%d", p, P-1)
		}
		m.Version += t.Version
		m.GeneratedAt = max(m.GeneratedAt, t.GeneratedAt)
		for id, v := range t.Configs {
			if _, ok := m.Configs[id]; !ok {
				m.Configs[id] = v
			}
		}
		groups := map[string]Group{}
		for _, g := range t.Groups {
			groups[g.ID] = g
		}
		used := map[string]bool{}
		for _, r := range t.Rules {
			bits := 24
			if !r.Prefix.Addr().Is4() {
				bits = 64
			}
			if r.Prefix.Bits() >= bits {
				cp, err := r.Prefix.Addr().Prefix(bits)
				if err != nil || partition(cp.String(), P) != p {
					continue // another partition's clients: its own table decides them
				}
			} else if p != 0 {
				continue // shorter prefixes: partition 0's
			}
			r.Group = fmt.Sprintf("p%d.%s", p, r.Group)
			m.Rules = append(m.Rules, r)
			used[r.Group] = true
		}
		for _, g := range t.Groups {
			id := fmt.Sprintf("p%d.%s", p, g.ID)
			if used[id] {
				m.Groups = append(m.Groups, Group{ID: id, Choices: g.Choices})
			}
		}
	}
	if _, ok := m.Configs[m.Default]; !ok {
		return nil, fmt.Errorf("merge: default config %s not in the tables", m.Default)
	}
	return m, nil
}
