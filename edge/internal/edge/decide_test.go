package edge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// withDecisionFields adds holdback (and salt, if not "") to a table document.
func withDecisionFields(t *testing.T, doc []byte, holdback float64, salt string) []byte {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal(doc, &m))
	m["holdback"] = holdback
	if salt != "" {
		m["salt"] = salt
	}
	b, err := json.Marshal(m)
	must(t, err)
	return b
}

// TestPlanDecideHoldback: spec/decision.md through Plan.Decide with
// per-connection draws: the draw's high half decides holdback for every
// client; a held-back client of a group reports the group, gets the
// default and logs the marginal probability of the default.
func TestPlanDecideHoldback(t *testing.T) {
	reg, err := knobs.Default()
	must(t, err)
	// group ga: 0.5 h2, 0.5 default; holdback 0.25
	doc := tableJSON(t, 3, h11, route{prefix: "10.0.0.0/8", values: h2})
	var m map[string]any
	must(t, json.Unmarshal(doc, &m))
	m["groups"].([]any)[0].(map[string]any)["choices"] = []any{
		map[string]any{"config": configID(t, h2), "p": 0.5}, map[string]any{"config": configID(t, h11), "p": 0.5}}
	doc, err = json.Marshal(m)
	must(t, err)
	table, err := rules.Parse(withDecisionFields(t, doc, 0.25, ""), reg)
	must(t, err)
	p := provision(table, reg, &tls.Config{}, &http.Server{})
	in, out := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1")
	def, tuned := configID(t, h11), configID(t, h2)
	cases := []struct {
		name  string
		addr  netip.Addr
		draw  uint64
		group string
		cfg   string
		p     float64
		held  bool
	}{
		{"held back: group reported, default, p = 0.75*0.5 + 0.25", in, 0x3fffffff_00000000, "ga", def, 0.625, true},
		{"treated, first choice: p = 0.75*0.5", in, 0x40000000_00000000, "ga", tuned, 0.375, false},
		{"treated, the default: same p as held back", in, 0x40000000_80000000, "ga", def, 0.625, false},
		{"unmatched and held back: default, p = 1, flagged", out, 0, "", def, 1, true},
		{"unmatched: default, p = 1", out, math.MaxUint64, "", def, 1, false},
		{"IPv4-mapped is its IPv4 client", netip.AddrFrom16(in.As16()), 0x3fffffff_00000000, "ga", def, 0.625, true},
	}
	for _, c := range cases {
		d := p.Decide(rules.Conn{Addr: c.addr}, c.draw)
		if d.Group != c.group || d.Config != c.cfg || math.Abs(d.P-c.p) > 1e-12 || d.Holdback != c.held || d.Conf != p.Configs[c.cfg] {
			t.Errorf("%s: %+v, want group %q config %s p %v holdback %v", c.name, d, c.group, c.cfg, c.p, c.held)
		}
	}
}

// TestTelemetryHeldBackClient: tailor-edge's telemetry for a held-back
// client under a salted table (per-client cohort draw of 127.0.0.1):
// group reported, default config, p the marginal probability, holdback
// true; and for a treated client of the same group the tuned config.
func TestTelemetryHeldBackClient(t *testing.T) {
	const holdback = 0.5
	saltFor := func(held bool) string { // a salt under which 127.0.0.1 is (not) held back
		thr := rules.HoldbackThreshold(holdback)
		for i := range 64 {
			salt := fmt.Sprintf("%032x", i)
			k0, k1, _ := rules.SaltKey(salt)
			if rules.HeldBack(rules.CohortDraw(k0, k1, netip.MustParseAddr("127.0.0.1"), 5), thr) == held {
				return salt
			}
		}
		t.Fatalf("no salt out of 64 gives holdback=%v", held)
		return ""
	}
	cases := []struct {
		held   bool
		config map[string]any
		p      float64
	}{
		{true, h11, holdback},     // group has only h2: p = (1-h)*0 + h
		{false, h2, 1 - holdback}, // p = (1-h)*1
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("holdback=%v", c.held), func(t *testing.T) {
			table := withDecisionFields(t, tableJSON(t, 5, h11, route{prefix: "127.0.0.0/8", values: h2}), holdback, saltFor(c.held))
			out := &lockedBuffer{}
			s, addr := startServer(t, Config{Telemetry: "-", TelemetryOut: out}, table)
			for range 3 { // sticky: every connection of the client gets the same
				get(t, addr, "site.test", "/")
			}
			must(t, s.sink.Flush(context.Background()))
			recs := readBatches(t, out.b.Bytes())
			if len(recs) != 3 {
				t.Fatalf("%d records, want 3", len(recs))
			}
			for _, r := range recs {
				if r.Group != "ga" || r.ConfigID != configID(t, c.config) || r.Probability == nil || math.Abs(*r.Probability-c.p) > 1e-9 ||
					r.Holdback == nil || *r.Holdback != c.held || r.TableVersion != 5 {
					t.Errorf("record group %q config %s p %v holdback %v, want ga %s %v %v", r.Group, r.ConfigID, deref(r.Probability), deref(r.Holdback),
						configID(t, c.config), c.p, c.held)
				}
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
