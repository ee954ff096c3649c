package rules

import (
	"hash/fnv"
	"net/netip"
	"testing"
)

func fnvPart(prefix string, P int) int {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	return int(h.Sum32() % uint32(P))
}

func TestMergePartitions(t *testing.T) {
	const P = 6
	// 10.0.0.0/24 is in partition 5, 10.0.1.0/24 in 0 (spec/vectors/bus/partition.json)
	if fnvPart("10.0.0.0/24", P) != 5 || fnvPart("10.0.1.0/24", P) != 0 {
		t.Fatal("partition vectors changed")
	}
	mk := func(version int64, rules ...Rule) *Table {
		t := &Table{Version: version, GeneratedAt: float64(version), Default: "c-0000000000", Salt: "s",
			Configs: map[string]map[string]any{"c-0000000000": {}, "c-1111111111": {"http.version": "2"}}}
		for _, r := range rules {
			t.Groups = append(t.Groups, Group{ID: r.Group, Choices: []Choice{{Config: "c-1111111111", P: 1}}})
			t.Rules = append(t.Rules, r)
		}
		return t
	}
	r := func(prefix, group string) Rule { return Rule{Prefix: netip.MustParsePrefix(prefix), Group: group} }
	parts := map[int]*Table{
		0: mk(2, r("10.0.1.0/24", "a"), r("10.0.0.0/24", "stale"), r("10.0.0.0/8", "wide"), r("10.0.1.128/25", "b")),
		5: mk(3, r("10.0.0.0/24", "c"), r("10.0.1.0/24", "other"), r("192.0.0.0/8", "ignored-wide")),
	}
	m, err := MergePartitions(P, parts, fnvPart)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 5 || m.GeneratedAt != 3 || m.Salt != "s" || m.Default != "c-0000000000" {
		t.Fatalf("merged header: %+v", m)
	}
	got := map[string]string{}
	for _, rule := range m.Rules {
		got[rule.Prefix.String()] = rule.Group
	}
	want := map[string]string{"10.0.1.0/24": "p0.a", "10.0.0.0/8": "p0.wide", "10.0.1.128/25": "p0.b", "10.0.0.0/24": "p5.c"}
	if len(got) != len(want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("rule %s -> %q, want %q", k, got[k], v)
		}
	}
	if len(m.Groups) != 4 {
		t.Errorf("groups %v", m.Groups)
	}
	res := NewResolver(m)
	if g := res.GroupOf(Conn{Addr: netip.MustParseAddr("10.0.0.7")}); g != "p5.c" {
		t.Errorf("10.0.0.7 -> %q", g)
	}
	if g := res.GroupOf(Conn{Addr: netip.MustParseAddr("10.9.0.7")}); g != "p0.wide" {
		t.Errorf("10.9.0.7 -> %q", g)
	}
	if m, err := MergePartitions(P, nil, fnvPart); m != nil || err != nil {
		t.Errorf("empty: %v %v", m, err)
	}
}
