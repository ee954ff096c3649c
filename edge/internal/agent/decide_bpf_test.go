package agent_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/bpf"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// decideVectors is the part of spec/vectors/decision-table/decide.json the
// sock_ops test reads.
type decideVectors struct {
	Tables []struct {
		Name  string          `json:"name"`
		Table json.RawMessage `json:"table"`
		Cases []struct {
			Addr     string   `json:"addr"`
			Group    *string  `json:"group"`
			Config   string   `json:"config"`
			P        float64  `json:"p"`
			Holdback bool     `json:"holdback"`
			Layers   []string `json:"layers"`
			Why      string   `json:"why"`
		} `json:"cases"`
	} `json:"tables"`
}

// TestSockopsDecideVectors: the sock_ops program, loaded and attached,
// applies spec/decision.md as rules.Decide does. Each table of decide.json
// is installed through the agent's compile path; for every TCP-layer case
// a real TCP connection from the case's client address (added to lo in a
// namespace of the test) reaches a server in the agent's cgroup, and the
// telemetry event of the connection must carry the case's config, group,
// probability and holdback flag (cohorts table: the draw is the client's
// SipHash, so the outcome is exact), or an outcome the rule allows
// (per-connection table: the draw is random). IPv4 clients reach an
// AF_INET listener; "::ffff:a.b.c.d" cases, and every IPv4 case a second
// time, reach a dual-stack AF_INET6 listener, whose IPv4 peers are
// v4-mapped.
func TestSockopsDecideVectors(t *testing.T) {
	privileged(t)
	raw, err := os.ReadFile("../../../spec/vectors/decision-table/decide.json")
	if err != nil {
		t.Skipf("shared vectors not reachable: %v", err)
	}
	var v decideVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	before := cgroupCount(t)
	var cgroup string
	t.Cleanup(func() { assertClean(t, cgroup, before) }) // runs last

	ns, _ := netns.Names()
	if err := netns.Add(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Del(ns) })
	sh(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0",
		"net.ipv6.conf.lo.disable_ipv6=0")
	const srv4, srv6 = "198.18.0.1", "fd00::1"
	addrs := map[string]bool{srv4: true, srv6: true}
	for _, tb := range v.Tables {
		for _, c := range tb.Cases {
			addrs[clientOf(c.Addr).String()] = true
		}
	}
	for a := range addrs {
		if netip.MustParseAddr(a).Is4() {
			sh(t, "ip", "-n", ns, "addr", "add", a+"/32", "dev", "lo")
		} else {
			sh(t, "ip", "-n", ns, "addr", "add", a+"/128", "dev", "lo", "nodad")
		}
	}

	a, sink, stop := startAgent(t, agent.Config{FullAddress: true, FlushEvery: 20 * time.Millisecond, Log: testLog{t}})
	cgroup = a.CgroupPath()
	defer stop()
	port := 20000 + os.Getpid()%20000
	inet := reports(startServer(t, a, ns, []string{serverEnv + "=" + srv4 + ":" + strconv.Itoa(port)}, os.Args[0], "-test.run=^$"))
	dual := reports(startServer(t, a, ns, []string{serverEnv + "=[::]:" + strconv.Itoa(port+1)}, os.Args[0], "-test.run=^$"))
	waitListen(t, ns, strconv.Itoa(port))
	waitListen(t, ns, strconv.Itoa(port+1))
	tb := &testbed{cli: ns}

	// connect makes one connection from client (through the dual-stack
	// listener if mapped) and returns what the server saw and the
	// connection's telemetry record.
	connect := func(t *testing.T, client netip.Addr, mapped bool) (sockReport, telemetry.Record) {
		t.Helper()
		dst, srv := srv4+":"+strconv.Itoa(port), inet
		switch {
		case client.Is6():
			dst, srv = "["+srv6+"]:"+strconv.Itoa(port+1), dual
		case mapped:
			dst, srv = srv4+":"+strconv.Itoa(port+1), dual
		}
		n := len(sink.all())
		c := tb.dial(t, client.String(), dst)
		acc := next(t, srv, "accept")
		buf := make([]byte, 64<<10)
		for got := 0; got < 64<<10; {
			m, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += m
		}
		c.Close()
		next(t, srv, "close")
		waitFor(t, "the connection's telemetry record", func() bool { return len(sink.all()) > n })
		recs := sink.all()
		if len(recs) != n+1 {
			t.Fatalf("%d telemetry records for one connection", len(recs)-n)
		}
		if r := recs[n]; r.ClientAddr != client.String() || acc.Remote != client.String() {
			t.Fatalf("connection from %s: record of %s, server saw %s", client, r.ClientAddr, acc.Remote)
		}
		return acc, recs[n]
	}

	for _, tv := range v.Tables {
		table, err := rules.Parse(tv.Table, reg)
		if err != nil {
			t.Fatalf("table %s: %v", tv.Name, err)
		}
		if _, err := a.Load(tv.Table); err != nil {
			t.Fatalf("install table %s: %v", tv.Name, err)
		}
		res := rules.NewResolver(table)
		statsBefore, _ := a.Stats()
		passed, total, extra := 0, 0, 0
		for i, c := range tv.Cases {
			if !hasLayer(c.Layers, "tcp") {
				continue
			}
			total++
			client := clientOf(c.Addr)
			mappedSpelling := netip.MustParseAddr(c.Addr).Is4In6()
			group := ""
			if c.Group != nil {
				group = *c.Group
			}
			ok := t.Run(fmt.Sprintf("%s/%d %s", tv.Name, i, c.Why), func(t *testing.T) {
				runs := 1
				if !res.Salted() {
					runs = 6 // random draws: several connections, each must be an outcome the rule allows
				}
				for range runs {
					acc, r := connect(t, client, mappedSpelling)
					got := rules.Decision{Group: r.Group, Config: r.ConfigID, P: *r.Probability, Holdback: *r.Holdback}
					if res.Salted() {
						want := rules.Decision{Group: group, Config: c.Config, P: c.P, Holdback: c.Holdback}
						if !sameDecision(got, want) {
							t.Fatalf("sock_ops decided %+v for %s, want %+v", got, c.Addr, want)
						}
					} else if !allowed(table, group, got) {
						t.Fatalf("sock_ops decided %+v for %s: not an outcome of group %q", got, c.Addr, group)
					} else if group == "" && (got.Config != table.Default || got.P != 1) {
						t.Fatalf("unmatched client %s: %+v, want the default with p = 1", c.Addr, got)
					}
					checkApplied(t, table, reg, got.Config, acc)
				}
			})
			if ok {
				passed++
			}
			if res.Salted() && client.Is4() && !mappedSpelling { // the same client as a v4-mapped AF_INET6 peer
				t.Run(fmt.Sprintf("%s/%d as a v4-mapped peer", tv.Name, i), func(t *testing.T) {
					acc, r := connect(t, client, true)
					got := rules.Decision{Group: r.Group, Config: r.ConfigID, P: *r.Probability, Holdback: *r.Holdback}
					if want := (rules.Decision{Group: group, Config: c.Config, P: c.P, Holdback: c.Holdback}); !sameDecision(got, want) {
						t.Fatalf("sock_ops decided %+v for ::ffff:%s, want %+v", got, client, want)
					}
					checkApplied(t, table, reg, got.Config, acc)
					extra++
				})
			}
		}
		st, _ := a.Stats()
		reused := st.PendingHit - statsBefore.PendingHit
		if res.Salted() && reused != 0 || !res.Salted() && reused == 0 {
			t.Errorf("table %s (salted %v): %d connections reused a TIMEOUT_INIT draw", tv.Name, res.Salted(), reused)
		}
		how := "exact outcome"
		if !res.Salted() {
			how = "outcome the rule allows, 6 connections each"
		}
		t.Logf("sock_ops, table %s: %d of %d TCP-layer decide.json cases passed (%s); %d more as v4-mapped peers; agent stats so far: %s",
			tv.Name, passed, total, how, extra, st)
		if total == 0 {
			t.Errorf("table %s has no TCP-layer cases", tv.Name)
		}
	}

	// The cohorts table republished as a later version (same salt): every
	// client keeps its holdback flag (the vectors' version-7 flag) and gets
	// what rules.Decide gives for that version; the arm half is re-drawn.
	// 2^32+7 has the low 32 bits of 7: the program must hash all 64.
	for _, tv := range v.Tables {
		if tv.Name != "cohorts" {
			continue
		}
		for _, version := range []int64{8, 1<<32 + 7} {
			raw := withVersion(t, tv.Table, version)
			table, err := rules.Parse(raw, reg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Load(raw); err != nil {
				t.Fatalf("install table %s version %d: %v", tv.Name, version, err)
			}
			if got := a.Version(); got != version {
				t.Fatalf("agent reports version %d, installed %d", got, version)
			}
			res := rules.NewResolver(table)
			passed, total, redrawn := 0, 0, 0
			for i, c := range tv.Cases {
				if !hasLayer(c.Layers, "tcp") {
					continue
				}
				total++
				client := clientOf(c.Addr)
				mapped := netip.MustParseAddr(c.Addr).Is4In6()
				want := res.Decide(rules.Conn{Addr: client}, 0)
				if want.Holdback != c.Holdback {
					t.Errorf("rules.Decide: %s held back %v in version %d, %v in the vectors' version", c.Addr, want.Holdback, version, c.Holdback)
				}
				if want.Config != c.Config {
					redrawn++
				}
				if t.Run(fmt.Sprintf("%s version %d/%d %s", tv.Name, version, i, c.Addr), func(t *testing.T) {
					acc, r := connect(t, client, mapped)
					got := rules.Decision{Group: r.Group, Config: r.ConfigID, P: *r.Probability, Holdback: *r.Holdback}
					if !sameDecision(got, want) || r.TableVersion != version {
						t.Fatalf("sock_ops decided %+v in table version %d for %s, want %+v in version %d", got, r.TableVersion, c.Addr, want, version)
					}
					checkApplied(t, table, reg, got.Config, acc)
				}) {
					passed++
				}
			}
			t.Logf("sock_ops, table %s as version %d: %d of %d TCP-layer cases match rules.Decide (holdback flags as in the vectors; %d cases get another configuration than in the vectors' version)",
				tv.Name, version, passed, total, redrawn)
			if version == 1<<32+7 && redrawn == 0 {
				t.Errorf("no case changes configuration in version %d: the high word of the version is not exercised", version)
			}
		}
	}
}

// withVersion is the table doc with its version replaced.
func withVersion(t *testing.T, doc json.RawMessage, version int64) []byte {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	m["version"] = json.Number(strconv.FormatInt(version, 10))
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// clientOf is the address a case's connection comes from (a v4-mapped
// spelling is its IPv4 client).
func clientOf(s string) netip.Addr { return netip.MustParseAddr(s).Unmap() }

func hasLayer(layers []string, l string) bool {
	for _, x := range layers {
		if x == l {
			return true
		}
	}
	return false
}

func sameDecision(a, b rules.Decision) bool {
	return a.Group == b.Group && a.Config == b.Config && a.Holdback == b.Holdback && math.Abs(a.P-b.P) <= 1e-9
}

// allowed: got is one of the outcomes spec/decision.md gives a client of
// group (a treated choice, or held back to the default), with the
// probability rules.PlanGroup logs for it (in the program's fixed point).
func allowed(t *rules.Table, group string, got rules.Decision) bool {
	if group == "" {
		return got.Group == "" && got.Config == t.Default && got.P == 1
	}
	for _, g := range t.Groups {
		if g.ID != group {
			continue
		}
		gp := rules.PlanGroup(g, t.Default, t.Holdback)
		if got.Holdback {
			return sameDecision(got, rules.Decision{Group: group, Config: t.Default, P: gp.PHeld, Holdback: true})
		}
		for k, cfg := range gp.Configs {
			if sameDecision(got, rules.Decision{Group: group, Config: cfg, P: gp.PTreated[k]}) {
				return true
			}
		}
	}
	return false
}

// checkApplied: the server socket runs the reported configuration's
// congestion control (and initial window, when the config sets one).
func checkApplied(t *testing.T, table *rules.Table, reg *knobs.Registry, config string, acc sockReport) {
	t.Helper()
	full := reg.Full(table.Configs[config])
	if cc := full["tcp.congestion_control"].(string); acc.CC != cc {
		t.Errorf("server socket runs %s, config %s has %s", acc.CC, config, cc)
	}
	if iw, ok := table.Configs[config]["tcp.initial_cwnd"]; ok {
		if n, _ := knobs.Int(iw); int64(acc.Cwnd) != n {
			t.Errorf("server socket cwnd %d, config %s has initial_cwnd %d", acc.Cwnd, config, n)
		}
	}
}

// TestSockopsVerifierStats loads the program with verifier statistics and
// reports its size and the instructions the verifier processed.
func TestSockopsVerifierStats(t *testing.T) {
	privileged(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec, err := bpf.LoadSockops()
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer coll.Close()
	log := coll.Programs["tailor_sockops"].VerifierLog
	var processed string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "processed ") {
			processed = l
		}
	}
	if processed == "" {
		t.Fatalf("no statistics in the verifier log: %q", log)
	}
	t.Logf("sock_ops program: %d instructions; verifier: %s", len(spec.Programs["tailor_sockops"].Instructions), processed)
}
