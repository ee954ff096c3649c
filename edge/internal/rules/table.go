// Package rules is the decision-table code shared by tailor-agent and
// tailor-edge: validation (spec/decision-table.schema.json plus the knob
// registry), the one decision rule of spec/decision.md (decide.go; the
// reference is tailor.table.decide) and compilation into the TCP layer's form.
package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// SchemaID is the only table schema this package reads.
const SchemaID = "tailor.decision-table/v1"

// probTolerance matches tailor.table.PROB_TOLERANCE.
const probTolerance = 1e-6

// ErrInvalidTable wraps every validation failure (as a *FieldError).
var ErrInvalidTable = errors.New("invalid decision table")

// FieldError names the table field at fault and why.
type FieldError struct {
	Field  string // e.g. "groups[0].choices"
	Reason string
}

func (e *FieldError) Error() string { return "decision table field " + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidTable) true.
func (e *FieldError) Unwrap() error { return ErrInvalidTable }

// Table is a validated decision table.
type Table struct {
	Version     int64
	GeneratedAt float64
	ValidForS   float64 // 0 = not given
	Policy      string
	Holdback    float64
	Salt        string // "" = no salt: per-connection draws (spec/decision.md)
	Default     string
	Configs     map[string]map[string]any // id -> knob values (json.Number normalised to int64)
	Groups      []Group
	Rules       []Rule
}

// Group is a set of configurations with their probabilities.
type Group struct {
	ID      string   `json:"id"`
	Choices []Choice `json:"choices"`
}

// Choice is one configuration of a group.
type Choice struct {
	Config string  `json:"config"`
	P      float64 `json:"p"`
}

// Rule maps a prefix (and optionally an SNI and device) to a group.
type Rule struct {
	Prefix netip.Prefix
	SNI    *string
	Device *string
	Group  string
}

// Parse decodes and validates a table against the schema and the registry.
func Parse(data []byte, reg *knobs.Registry) (*Table, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return nil, &FieldError{Field: "(root)", Reason: "not JSON: " + err.Error()}
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, &FieldError{Field: "(root)", Reason: "not JSON: data after the document"}
	}
	if err := checkSchema(doc); err != nil {
		return nil, err
	}
	t, err := fromDoc(doc.(obj))
	if err != nil {
		return nil, err
	}
	return t, t.check(reg)
}

func fromDoc(root obj) (*Table, error) {
	t := &Table{Default: root["default"].(string), Configs: map[string]map[string]any{}}
	t.Version, _ = knobs.Int(root["version"])
	if t.Version == 0 { // integral float such as 7.0
		t.Version = int64(mustFloat(root["version"].(json.Number)))
	}
	t.GeneratedAt = mustFloat(root["generated_at"].(json.Number))
	t.ValidForS = optFloat(root["valid_for_s"])
	t.Holdback = optFloat(root["holdback"])
	t.Policy, _ = root["policy"].(string)
	t.Salt, _ = root["salt"].(string)
	for id, v := range root["configs"].(obj) {
		t.Configs[id] = v.(obj)
	}
	if err := redecode(root["groups"], &t.Groups); err != nil {
		return nil, err
	}
	for i, r := range root["rules"].([]any) {
		rule, err := ruleFromDoc(r.(obj), i)
		if err != nil {
			return nil, err
		}
		t.Rules = append(t.Rules, rule)
	}
	return t, nil
}

func ruleFromDoc(m obj, i int) (Rule, error) {
	r := Rule{Group: m["group"].(string)}
	p, err := parsePrefix(m["prefix"].(string))
	if err != nil {
		return r, fail(path{"rules", i, "prefix"}, "%v", err)
	}
	r.Prefix = p
	if s, ok := m["sni"].(string); ok {
		r.SNI = &s
	}
	if s, ok := m["device"].(string); ok {
		r.Device = &s
	}
	return r, nil
}

// parsePrefix accepts a prefix in canonical spelling only: what
// netip.Prefix.String (and Python's str(ip_network)) prints, with the host
// bits zero. Python's ipaddress also reads netmask notation
// ("10.0.0.0/255.0.0.0"), leading zeros ("/08"), zones ("fe80::%eth0/64"),
// upper-case IPv6 and bare addresses; those are refused with the canonical
// spelling to write instead (tailor.table._network has the same rule).
func parsePrefix(s string) (netip.Prefix, error) {
	if len(s) > maxPrefixChars { // checked by the schema too; never parse a long string
		return netip.Prefix{}, fmt.Errorf("%s is too long", short(s))
	}
	p, ok := lenientPrefix(s)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%s does not appear to be an IPv4 or IPv6 network", short(s))
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set", short(s))
	}
	if p.String() != s {
		return netip.Prefix{}, fmt.Errorf("%s is not a canonical prefix (write '%s')", short(s), p)
	}
	return p, nil
}

// lenientPrefix reads the spellings Python's ip_network accepts (zone
// dropped), so a non-canonical prefix gets its canonical form in the error.
func lenientPrefix(s string) (netip.Prefix, bool) {
	addrText, bitsText, hasBits := strings.Cut(s, "/")
	if i := strings.IndexByte(addrText, '%'); i >= 0 {
		addrText = addrText[:i]
	}
	a, err := netip.ParseAddr(addrText)
	if err != nil {
		return netip.Prefix{}, false
	}
	bits := a.BitLen()
	if hasBits {
		var ok bool
		if bits, ok = maskBits(bitsText, a); !ok {
			return netip.Prefix{}, false
		}
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, bits), p.IsValid()
}

// maskBits reads a prefix length: decimal digits (leading zeros allowed)
// or, for IPv4, a dotted netmask.
func maskBits(t string, a netip.Addr) (int, bool) {
	if t != "" && len(t) <= 3 && strings.Trim(t, "0123456789") == "" {
		n, _ := strconv.Atoi(t)
		return n, n <= a.BitLen()
	}
	m, err := netip.ParseAddr(t)
	if err != nil || !a.Is4() || !m.Is4() {
		return 0, false
	}
	b := m.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	ones := 0
	for ; ones < 32 && v&(1<<(31-ones)) != 0; ones++ {
	}
	if v<<ones != 0 {
		return 0, false
	}
	return ones, true
}

func (t *Table) check(reg *knobs.Registry) error {
	if err := t.checkConfigs(reg); err != nil {
		return err
	}
	if err := t.checkGroups(); err != nil {
		return err
	}
	return t.checkRules()
}

func (t *Table) checkConfigs(reg *knobs.Registry) error {
	for _, id := range sortedConfigIDs(t.Configs) {
		values := t.Configs[id]
		if err := reg.CheckAssignment(values); err != nil {
			return fail(path{"configs", id}, "%v", err)
		}
		if want := reg.ConfigID(values); want != id {
			return fail(path{"configs", id}, "id does not match its content (expected %s)", want)
		}
		for k, v := range values {
			values[k], _ = knobs.Normalize(v)
		}
	}
	if _, ok := t.Configs[t.Default]; !ok {
		return fail(path{"default"}, "config %s is not in configs", t.Default)
	}
	return nil
}

func (t *Table) checkGroups() error {
	seen := map[string]bool{}
	for i, g := range t.Groups {
		if seen[g.ID] {
			return fail(path{"groups", i, "id"}, "duplicate group id '%s'", g.ID)
		}
		seen[g.ID] = true
		total := 0.0
		for j, c := range g.Choices {
			if _, ok := t.Configs[c.Config]; !ok {
				return fail(path{"groups", i, "choices", j, "config"}, "unknown config %s", c.Config)
			}
			total += c.P
		}
		if math.Abs(total-1) > probTolerance {
			return fail(path{"groups", i, "choices"}, "probabilities sum to %.9f, not 1", total)
		}
	}
	return nil
}

func (t *Table) checkRules() error {
	groups := map[string]bool{}
	for _, g := range t.Groups {
		groups[g.ID] = true
	}
	type key struct {
		p           netip.Prefix
		sni, device string
		hasS, hasD  bool
	}
	seen := map[key]bool{}
	for i, r := range t.Rules {
		if !groups[r.Group] {
			return fail(path{"rules", i, "group"}, "unknown group '%s'", r.Group)
		}
		k := key{p: r.Prefix, sni: deref(r.SNI), device: deref(r.Device), hasS: r.SNI != nil, hasD: r.Device != nil}
		if seen[k] {
			return fail(path{"rules", i}, "duplicate rule for %s sni=%s device=%s", r.Prefix, pyOpt(r.SNI), pyOpt(r.Device))
		}
		seen[k] = true
	}
	return nil
}

func redecode(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func optFloat(v any) float64 {
	if n, ok := v.(json.Number); ok {
		return mustFloat(n)
	}
	return 0
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func pyOpt(s *string) string {
	if s == nil {
		return "None"
	}
	return *s
}

func sortedConfigIDs(m map[string]map[string]any) []string {
	o := obj{}
	for k := range m {
		o[k] = nil
	}
	return sortedKeys(o)
}
