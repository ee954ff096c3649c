package rules

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// MaxChoices is the most configurations a group may hold in the compiled
// form (the sock_ops program walks a fixed-size array).
const MaxChoices = 8

// NoGroup marks a prefix entry that resolves to the default configuration.
const NoGroup = -1

// Compiled is a table reduced to what the TCP layer can use: prefixes
// (rules with sni or device are dropped: only tailor-edge sees those),
// groups as the decision rule needs them (PlanGroup: thresholds and the
// logged probabilities) and configs with every knob filled in.
type Compiled struct {
	Version  int64
	Holdback float64
	HoldThr  uint32 // HoldbackThreshold(Holdback)
	Salted   bool   // draws are per client: CohortDraw under (K0, K1)
	K0, K1   uint64 // SaltKey of the table's salt
	Default  int    // index into Configs
	Configs  []CompiledConfig
	Groups   []CompiledGroup
	Prefixes []PrefixEntry
	Ignored  []string // rules not applicable at the TCP layer, with the reason
}

// CompiledConfig is one configuration with all per-connection knobs set.
type CompiledConfig struct {
	ID    string
	Knobs map[string]any // every per-connection knob, defaults filled in
	Set   map[string]any // only the knobs the table set (non-default)
}

// CompiledGroup is a group's GroupPlan with configs as indexes.
type CompiledGroup struct {
	ID      string
	Configs []int     // indexes into Compiled.Configs
	Cum     []uint64  // thresholds x 2^32 (Thresholds)
	P       []float64 // logged probability of each choice when treated (GroupPlan.PTreated)
	PHeld   float64   // logged probability of the default when held back (GroupPlan.PHeld)
}

// PrefixEntry is one TCP-layer rule: prefix -> group index (or NoGroup).
type PrefixEntry struct {
	Prefix netip.Prefix
	Group  int
}

// Compile prepares t for the TCP layer.
func Compile(t *Table, reg *knobs.Registry) (*Compiled, error) {
	c := &Compiled{Version: t.Version, Holdback: t.Holdback, HoldThr: HoldbackThreshold(t.Holdback)}
	c.K0, c.K1, c.Salted = SaltKey(t.Salt)
	index := compileConfigs(t, reg, c)
	c.Default = index[t.Default]
	groupIndex := map[string]int{}
	for i, g := range t.Groups {
		if len(g.Choices) > MaxChoices {
			return nil, &UnsupportedError{Field: fmt.Sprintf("groups[%d].choices", i), What: fmt.Sprintf("%d choices (the TCP layer holds at most %d)", len(g.Choices), MaxChoices)}
		}
		c.Groups = append(c.Groups, compileGroup(PlanGroup(g, t.Default, t.Holdback), index))
		groupIndex[g.ID] = i
	}
	for i, r := range t.Rules {
		if r.SNI != nil || r.Device != nil {
			c.Ignored = append(c.Ignored, fmt.Sprintf("rules[%d] (%s): sni/device are not visible at the TCP layer; tailor-edge applies it", i, r.Prefix))
			continue
		}
		c.Prefixes = append(c.Prefixes, PrefixEntry{Prefix: r.Prefix, Group: groupIndex[r.Group]})
	}
	return c, nil
}

func compileConfigs(t *Table, reg *knobs.Registry, c *Compiled) map[string]int {
	ids := sortedConfigIDs(t.Configs)
	index := map[string]int{}
	for i, id := range ids {
		set := map[string]any{}
		for k, v := range t.Configs[id] {
			if v != reg.Knobs[k].Default {
				set[k] = v
			}
		}
		c.Configs = append(c.Configs, CompiledConfig{ID: id, Knobs: reg.Full(t.Configs[id]), Set: set})
		index[id] = i
	}
	return index
}

func compileGroup(gp GroupPlan, index map[string]int) CompiledGroup {
	cg := CompiledGroup{ID: gp.ID, Cum: gp.Cum, P: gp.PTreated, PHeld: gp.PHeld}
	for _, id := range gp.Configs {
		cg.Configs = append(cg.Configs, index[id])
	}
	return cg
}

// SortedPrefixes returns the entries most specific first (useful for logs).
func (c *Compiled) SortedPrefixes() []PrefixEntry {
	out := append([]PrefixEntry(nil), c.Prefixes...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Prefix.Bits() > out[j].Prefix.Bits() })
	return out
}

// UnsupportedError reports a valid table feature this layer cannot apply.
type UnsupportedError struct {
	Field string
	What  string
}

func (e *UnsupportedError) Error() string {
	return "decision table field " + e.Field + ": unsupported: " + e.What
}
