package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file checks a decoded table against spec/decision-table.schema.json
// with the same messages as Python's jsonschema, so both sides name the
// same field and reason for the shared invalid vectors.

var configIDPattern = regexp.MustCompile(`^c-[0-9a-f]{10}$`)

const configIDSource = `^c-[0-9a-f]{10}$`

// Bounds of spec/decision-table.schema.json. Go's regexp treats `$` as the
// end of the input (no match before a final newline), like the Python
// side's ECMA-262 reading of the patterns.
const (
	maxSafeInt     = 9007199254740991 // version
	maxConfigs     = 4096             // configs: maxProperties
	maxKnobs       = 64               // configs.<id>: maxProperties
	maxKnobName    = 64               // configs.<id>: propertyNames maxLength
	maxKnobString  = 64               // configs.<id>.<knob>: maxLength (strings)
	maxGroups      = 100000           // groups: maxItems
	maxChoices     = 4096             // groups[i].choices: maxItems
	maxRules       = 1000000          // rules: maxItems
	maxPrefixChars = 43               // rules[i].prefix: maxLength
)

// strBound is a string's schema: minLength, maxLength and pattern.
type strBound struct {
	min, max int
	pat      string
	re       *regexp.Regexp
}

func newStrBound(min, max int, pat string) strBound {
	b := strBound{min: min, max: max, pat: pat}
	if pat != "" {
		b.re = regexp.MustCompile(pat)
	}
	return b
}

var (
	policyBound  = newStrBound(0, 100, `^[!-~]*$`)
	saltBound    = newStrBound(0, math.MaxInt, `^[0-9a-f]{32}$`) // no maxLength: the pattern bounds it
	groupIDBound = newStrBound(1, 320, `^[ -~]+$`)
	ruleBounds   = map[string]strBound{
		"prefix": newStrBound(0, maxPrefixChars, ""),
		"sni":    newStrBound(1, 253, `^[A-Za-z0-9._-]*$`),
		"device": newStrBound(1, 64, `^[!-~]*$`),
		"group":  newStrBound(1, 320, ""),
	}
)

// str checks type, maxLength (in characters, like Python's len),
// minLength and pattern, in that order.
func str(v any, p path, b strBound) error {
	s, ok := v.(string)
	if !ok {
		return fail(p, "%s is not of type 'string'", short(v))
	}
	n := utf8.RuneCountInString(s)
	if n > b.max {
		return fail(p, "%s is too long", short(s))
	}
	if n < b.min {
		return fail(p, "%s should be non-empty", short(s))
	}
	if b.re != nil && !b.re.MatchString(s) {
		return fail(p, "%s does not match '%s'", short(s), b.pat)
	}
	return nil
}

// numBound is a number's schema: minimum / exclusiveMinimum and maximum /
// exclusiveMaximum, with the bounds spelled as Python prints them.
type numBound struct {
	lo, hi     string // "" = unbounded
	loEx, hiEx bool
}

var (
	generatedAtBound = numBound{lo: "0", hi: "10000000000.0"}
	validForBound    = numBound{lo: "0", loEx: true, hi: "31536000"}
	holdbackBound    = numBound{lo: "0", hi: "1", hiEx: true}
	probBound        = numBound{lo: "0", loEx: true, hi: "1"}
)

type obj = map[string]any

// path is a JSON location rendered like tailor.table._path.
type path []any

func (p path) at(k any) path { return append(append(path{}, p...), k) }

func (p path) String() string {
	out := ""
	for _, part := range p {
		if i, ok := part.(int); ok {
			out += "[" + strconv.Itoa(i) + "]"
		} else if out != "" {
			out += "." + part.(string)
		} else {
			out = part.(string)
		}
	}
	if out == "" {
		return "(root)"
	}
	return out
}

func fail(p path, format string, args ...any) error {
	return &FieldError{Field: p.String(), Reason: fmt.Sprintf(format, args...)}
}

var topKeys = []string{"schema", "version", "generated_at", "valid_for_s", "policy", "holdback", "salt", "default", "configs", "groups", "rules"}

func checkSchema(doc any) error {
	root, err := object(doc, path{}, []string{"schema", "version", "generated_at", "default", "configs", "groups", "rules"}, topKeys)
	if err != nil {
		return err
	}
	checks := []func(obj) error{checkScalars, checkConfigsShape, checkGroupsShape, checkRulesShape}
	for _, c := range checks {
		if err := c(root); err != nil {
			return err
		}
	}
	return nil
}

func checkScalars(root obj) error {
	if s := root["schema"]; s != SchemaID {
		return fail(path{"schema"}, "'%s' was expected", SchemaID)
	}
	if err := integer(root["version"], path{"version"}, 1, maxSafeInt); err != nil {
		return err
	}
	if err := numberIn(root["generated_at"], path{"generated_at"}, generatedAtBound); err != nil {
		return err
	}
	if v, ok := root["valid_for_s"]; ok {
		if err := numberIn(v, path{"valid_for_s"}, validForBound); err != nil {
			return err
		}
	}
	if v, ok := root["policy"]; ok {
		if err := str(v, path{"policy"}, policyBound); err != nil {
			return err
		}
	}
	if v, ok := root["holdback"]; ok {
		if err := numberIn(v, path{"holdback"}, holdbackBound); err != nil {
			return err
		}
	}
	if v, ok := root["salt"]; ok {
		if err := str(v, path{"salt"}, saltBound); err != nil {
			return err
		}
	}
	return pattern(root["default"], path{"default"})
}

func checkConfigsShape(root obj) error {
	p := path{"configs"}
	cfgs, ok := root["configs"].(obj)
	if !ok {
		return fail(p, "%s is not of type 'object'", short(root["configs"]))
	}
	if len(cfgs) == 0 {
		return fail(p, "{} should be non-empty")
	}
	if len(cfgs) > maxConfigs {
		return fail(p, "%d configs: has too many properties (at most %d)", len(cfgs), maxConfigs)
	}
	for _, id := range sortedKeys(cfgs) {
		if !configIDPattern.MatchString(id) {
			return fail(p, "%s does not match '%s'", short(id), configIDSource)
		}
		knobs, ok := cfgs[id].(obj)
		if !ok {
			return fail(p.at(id), "%s is not of type 'object'", short(cfgs[id]))
		}
		if len(knobs) > maxKnobs {
			return fail(p.at(id), "%d knobs: has too many properties (at most %d)", len(knobs), maxKnobs)
		}
		for _, name := range sortedKeys(knobs) {
			if utf8.RuneCountInString(name) > maxKnobName {
				return fail(p.at(id), "%s is too long", short(name))
			}
			switch v := knobs[name].(type) {
			case bool:
			case string:
				if utf8.RuneCountInString(v) > maxKnobString {
					return fail(p.at(id).at(name), "%s is too long", short(v))
				}
			case json.Number:
				// an integer literal beyond int64 is still an integer: the
				// knob's bounds reject it (knobs.Knob.Check)
				if _, err := strconv.ParseInt(string(v), 10, 64); err != nil && !intLiteral(string(v)) {
					return fail(p.at(id).at(name), "%s is not of type 'string', 'integer', 'boolean'", short(v))
				}
			default:
				return fail(p.at(id).at(name), "%s is not of type 'string', 'integer', 'boolean'", short(v))
			}
		}
	}
	return nil
}

func checkGroupsShape(root obj) error {
	groups, ok := root["groups"].([]any)
	if !ok {
		return fail(path{"groups"}, "%s is not of type 'array'", short(root["groups"]))
	}
	if len(groups) > maxGroups {
		return fail(path{"groups"}, "%d groups is too long (at most %d)", len(groups), maxGroups)
	}
	for i, g := range groups {
		p := path{"groups", i}
		gm, err := object(g, p, []string{"id", "choices"}, []string{"id", "choices"})
		if err != nil {
			return err
		}
		if err := str(gm["id"], p.at("id"), groupIDBound); err != nil {
			return err
		}
		if err := checkChoicesShape(gm["choices"], p.at("choices")); err != nil {
			return err
		}
	}
	return nil
}

func checkChoicesShape(v any, p path) error {
	choices, ok := v.([]any)
	if !ok {
		return fail(p, "%s is not of type 'array'", short(v))
	}
	if len(choices) == 0 {
		return fail(p, "[] should be non-empty")
	}
	if len(choices) > maxChoices {
		return fail(p, "%d choices is too long (at most %d)", len(choices), maxChoices)
	}
	for j, c := range choices {
		cm, err := object(c, p.at(j), []string{"config", "p"}, []string{"config", "p"})
		if err != nil {
			return err
		}
		if err := pattern(cm["config"], p.at(j).at("config")); err != nil {
			return err
		}
		if err := numberIn(cm["p"], p.at(j).at("p"), probBound); err != nil {
			return err
		}
	}
	return nil
}

func checkRulesShape(root obj) error {
	rules, ok := root["rules"].([]any)
	if !ok {
		return fail(path{"rules"}, "%s is not of type 'array'", short(root["rules"]))
	}
	if len(rules) > maxRules {
		return fail(path{"rules"}, "%d rules is too long (at most %d)", len(rules), maxRules)
	}
	for i, r := range rules {
		p := path{"rules", i}
		rm, err := object(r, p, []string{"prefix", "group"}, []string{"prefix", "sni", "device", "group"})
		if err != nil {
			return err
		}
		for _, k := range sortedKeys(rm) {
			if err := str(rm[k], p.at(k), ruleBounds[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// object checks type, required and additionalProperties (in that order,
// as jsonschema reports the first by path).
func object(v any, p path, required, allowed []string) (obj, error) {
	m, ok := v.(obj)
	if !ok {
		return nil, fail(p, "%s is not of type 'object'", short(v))
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return nil, fail(p, "'%s' is a required property", k)
		}
	}
	var extra []string
	for _, k := range sortedKeys(m) {
		if !containsStr(allowed, k) {
			extra = append(extra, short(k))
		}
	}
	if len(extra) > 0 {
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		return nil, fail(p, "Additional properties are not allowed (%s %s unexpected)", strings.Join(extra, ", "), verb)
	}
	return m, nil
}

var intLiteralRE = regexp.MustCompile(`^-?[0-9]+$`)

// intLiteral: an integer JSON literal (no fraction, no exponent), of any size.
func intLiteral(s string) bool { return intLiteralRE.MatchString(s) }

// integer checks a JSON integer within [lo, hi]. Like jsonschema, an
// integral float (7.0) is an integer, and a literal beyond int64 is an
// integer outside the bounds, not a type error.
func integer(v any, p path, lo, hi int64) error {
	n, ok := v.(json.Number)
	if !ok {
		return fail(p, "%s is not of type 'integer'", short(v))
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	switch {
	case err == nil:
		if i < lo {
			return fail(p, "%s is less than the minimum of %d", n, lo)
		}
		if i > hi {
			return fail(p, "%s is greater than the maximum of %d", n, hi)
		}
		return nil
	case intLiteral(string(n)): // beyond int64
		if strings.HasPrefix(string(n), "-") {
			return fail(p, "%s is less than the minimum of %d", n, lo)
		}
		return fail(p, "%s is greater than the maximum of %d", n, hi)
	}
	f, ferr := n.Float64()
	if ferr != nil || math.IsInf(f, 0) || f != math.Trunc(f) {
		return fail(p, "%s is not of type 'integer'", short(v))
	}
	if f < float64(lo) {
		return fail(p, "%s is less than the minimum of %d", n, lo)
	}
	if f > float64(hi) {
		return fail(p, "%s is greater than the maximum of %d", n, hi)
	}
	return nil
}

func number(v any, p path) error {
	if _, ok := v.(json.Number); !ok {
		return fail(p, "%s is not of type 'number'", short(v))
	}
	return nil
}

// numberIn checks a JSON number against b. A literal too large for a
// float64 (1e999) reads as ±Inf and fails the bound, as in Python.
func numberIn(v any, p path, b numBound) error {
	if err := number(v, p); err != nil {
		return err
	}
	f, _ := v.(json.Number).Float64() // ±Inf on overflow
	if b.lo != "" {
		lo, _ := strconv.ParseFloat(b.lo, 64)
		if b.loEx && f <= lo {
			return fail(p, "%s is less than or equal to the minimum of %s", v, b.lo)
		}
		if !b.loEx && f < lo {
			return fail(p, "%s is less than the minimum of %s", v, b.lo)
		}
	}
	if b.hi != "" {
		hi, _ := strconv.ParseFloat(b.hi, 64)
		if b.hiEx && f >= hi {
			return fail(p, "%s is greater than or equal to the maximum of %s", v, b.hi)
		}
		if !b.hiEx && f > hi {
			return fail(p, "%s is greater than the maximum of %s", v, b.hi)
		}
	}
	return nil
}

func pattern(v any, p path) error {
	s, ok := v.(string)
	if !ok {
		return fail(p, "%s is not of type 'string'", short(v))
	}
	if !configIDPattern.MatchString(s) {
		return fail(p, "%s does not match '%s'", short(s), configIDSource)
	}
	return nil
}

func mustFloat(n json.Number) float64 {
	f, _ := n.Float64()
	return f
}

// short is repr cut to 80 characters (tailor.table._short): messages are
// logged, and a hostile table must not flood or forge log lines.
func short(v any) string {
	text := repr(v)
	if utf8.RuneCountInString(text) <= 80 {
		return text
	}
	return string([]rune(text)[:77]) + "..."
}

// pyStr is Python's repr of a str: quotes, and escapes for backslash,
// control and non-printable characters (never a raw newline).
func pyStr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == utf8.RuneError || !strconv.IsPrint(r):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

func repr(v any) string {
	switch x := v.(type) {
	case string:
		return pyStr(x)
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedKeys(m obj) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
