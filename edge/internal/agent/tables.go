package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tailor-project/tailor/edge/internal/bpf"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// grace is how long a retired generation stays untouched before it is
// rewritten: a sock_ops callback that read the old generation index runs
// for microseconds, so it has finished long before.
const grace = 50 * time.Millisecond

// A connection's telemetry names its group from the table it was decided
// with (its version), so the agent remembers the group ids of recent
// tables: always the last keepVersions installed, and older ones while all
// remembered ids stay within historyBytes. Until 2026-12-07 only 16 were
// kept, so an HTTP/2 connection that outlived 16 installs (minutes at one
// table per manager cycle) lost its group (found by review). Ids repeated
// from the previous table share its strings.
const (
	keepVersions = 16
	historyBytes = 32 << 20
)

// Load parses, validates and compiles a table and installs it.
func (a *Agent) Load(data []byte) (*rules.Compiled, error) {
	t, err := rules.Parse(data, a.reg)
	if err != nil {
		return nil, err
	}
	c, err := rules.Compile(t, a.reg)
	if err != nil {
		return nil, err
	}
	return c, a.Install(c)
}

// Install writes c into the inactive generation, then flips the active
// index: a connection sees either the whole old table or the whole new one.
func (a *Agent) Install(c *rules.Compiled) error {
	g, err := buildGeneration(c, a.hz, a.available)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	time.Sleep(grace)
	next := a.gen ^ 1
	if err := a.writeGeneration(next, g); err != nil {
		return err
	}
	if err := a.objs.Active.Put(uint32(0), next); err != nil {
		return fmt.Errorf("%w: flip generation: %v", ErrAgent, err)
	}
	a.gen = next
	a.remember(c)
	return nil
}

func (a *Agent) writeGeneration(gen uint32, g *generation) error {
	trie, err := ebpf.NewMap(a.inner)
	if err != nil {
		return fmt.Errorf("%w: new trie: %v", ErrAgent, err)
	}
	defer trie.Close()
	if len(g.keys) > 0 {
		if _, err := trie.BatchUpdate(g.keys, g.values, nil); err != nil {
			return fmt.Errorf("%w: fill trie: %v", ErrAgent, err)
		}
	}
	if err := a.objs.Prefixes.Put(gen, trie); err != nil {
		return fmt.Errorf("%w: swap trie: %v", ErrAgent, err)
	}
	if err := putAll(a.objs.Configs, gen*maxConfigs, g.configs); err != nil {
		return err
	}
	if err := putAll(a.objs.Groups, gen*maxGroups, g.groups); err != nil {
		return err
	}
	return a.objs.Metas.Put(gen, g.meta)
}

func putAll[T any](m *ebpf.Map, base uint32, vals []T) error {
	if len(vals) == 0 {
		return nil
	}
	keys := make([]uint32, len(vals))
	for i := range keys {
		keys[i] = base + uint32(i)
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		return fmt.Errorf("%w: update %s: %v", ErrAgent, m, err)
	}
	return nil
}

// remember keeps c's group ids under its version (a version installed
// again replaces the ids it had: the program's connections of the old one
// are named by the new one, as a version names one table).
func (a *Agent) remember(c *rules.Compiled) {
	prev := map[string]string{}
	if n := len(a.order); n > 0 {
		for _, id := range a.history[a.order[n-1]] {
			prev[id] = id
		}
	}
	ids := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		if s, ok := prev[g.ID]; ok {
			ids[i] = s
		} else {
			ids[i] = g.ID
		}
	}
	if old, ok := a.history[c.Version]; ok {
		a.historySize -= idsSize(old)
		a.order = slices.DeleteFunc(a.order, func(v int64) bool { return v == c.Version })
	}
	a.history[c.Version] = ids
	a.order = append(a.order, c.Version)
	a.historySize += idsSize(ids)
	for len(a.order) > keepVersions && a.historySize > historyBytes {
		a.historySize -= idsSize(a.history[a.order[0]])
		delete(a.history, a.order[0])
		a.order = a.order[1:]
	}
}

func idsSize(ids []string) int {
	n := 16 * len(ids)
	for _, id := range ids {
		n += len(id)
	}
	return n
}

// restoreGeneration picks up the active generation from pinned maps.
func (a *Agent) restoreGeneration() error {
	var gen uint32
	if err := a.objs.Active.Lookup(uint32(0), &gen); err != nil {
		return fmt.Errorf("%w: read active generation: %v", ErrAgent, err)
	}
	a.gen = gen & 1
	return nil
}

// Version is the installed table version (0 = none).
func (a *Agent) Version() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var m bpf.SockopsMeta
	if err := a.objs.Metas.Lookup(a.gen, &m); err != nil {
		return 0
	}
	return int64(m.Version)
}

// LastError is the most recent table error (nil after a good table).
func (a *Agent) LastError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

func (a *Agent) setLastError(err error) {
	a.mu.Lock()
	a.lastErr = err
	a.mu.Unlock()
}

// groupID names group index g of the table of this version ("" when the
// version is no longer remembered, counted in groupsForgotten).
func (a *Agent) groupID(version int64, g uint32) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids, ok := a.history[version]
	if !ok {
		a.groupsForgotten.Add(1)
		return ""
	}
	if int(g) < len(ids) {
		return ids[g]
	}
	return ""
}
