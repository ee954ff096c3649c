package rules

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// This file checks a decoded table against spec/decision-table.schema.json
// with the same messages as Python's jsonschema, so both sides name the
// same field and reason for the shared invalid vectors.

var configIDPattern = regexp.MustCompile(`^c-[0-9a-f]{10}$`)

const configIDSource = `^c-[0-9a-f]{10}$`

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

var topKeys = []string{"schema", "version", "generated_at", "valid_for_s", "policy", "holdback", "default", "configs", "groups", "rules"}

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
	if err := integer(root["version"], path{"version"}, 1); err != nil {
		return err
	}
	if err := number(root["generated_at"], path{"generated_at"}); err != nil {
		return err
	}
	if v, ok := root["valid_for_s"]; ok {
		if err := numberRange(v, path{"valid_for_s"}, 0, false, 0, false); err != nil {
			return err
		}
	}
	if v, ok := root["policy"]; ok {
		if _, isStr := v.(string); !isStr {
			return fail(path{"policy"}, "%s is not of type 'string'", repr(v))
		}
	}
	if v, ok := root["holdback"]; ok {
		if err := numberRange(v, path{"holdback"}, 0, true, 1, true); err != nil {
			return err
		}
	}
	return pattern(root["default"], path{"default"})
}

func checkConfigsShape(root obj) error {
	p := path{"configs"}
	cfgs, ok := root["configs"].(obj)
	if !ok {
		return fail(p, "%s is not of type 'object'", repr(root["configs"]))
	}
	if len(cfgs) == 0 {
		return fail(p, "{} should be non-empty")
	}
	for _, id := range sortedKeys(cfgs) {
		if !configIDPattern.MatchString(id) {
			return fail(p, "'%s' does not match '%s'", id, configIDSource)
		}
		knobs, ok := cfgs[id].(obj)
		if !ok {
			return fail(p.at(id), "%s is not of type 'object'", repr(cfgs[id]))
		}
		for _, name := range sortedKeys(knobs) {
			switch knobs[name].(type) {
			case string, bool:
			case json.Number:
				if _, err := strconv.ParseInt(string(knobs[name].(json.Number)), 10, 64); err != nil {
					return fail(p.at(id).at(name), "%s is not of type 'string', 'integer', 'boolean'", repr(knobs[name]))
				}
			default:
				return fail(p.at(id).at(name), "%s is not of type 'string', 'integer', 'boolean'", repr(knobs[name]))
			}
		}
	}
	return nil
}

func checkGroupsShape(root obj) error {
	groups, ok := root["groups"].([]any)
	if !ok {
		return fail(path{"groups"}, "%s is not of type 'array'", repr(root["groups"]))
	}
	for i, g := range groups {
		p := path{"groups", i}
		gm, err := object(g, p, []string{"id", "choices"}, []string{"id", "choices"})
		if err != nil {
			return err
		}
		id, ok := gm["id"].(string)
		if !ok || len(id) < 1 || len([]rune(id)) > 200 {
			return fail(p.at("id"), "%s is not a string of length 1..200", repr(gm["id"]))
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
		return fail(p, "%s is not of type 'array'", repr(v))
	}
	if len(choices) == 0 {
		return fail(p, "[] should be non-empty")
	}
	for j, c := range choices {
		cm, err := object(c, p.at(j), []string{"config", "p"}, []string{"config", "p"})
		if err != nil {
			return err
		}
		if err := pattern(cm["config"], p.at(j).at("config")); err != nil {
			return err
		}
		if err := numberRange(cm["p"], p.at(j).at("p"), 0, false, 1, false); err != nil {
			return err
		}
		if f, _ := cm["p"].(json.Number).Float64(); f > 1 {
			return fail(p.at(j).at("p"), "%s is greater than the maximum of 1", cm["p"])
		}
	}
	return nil
}

func checkRulesShape(root obj) error {
	rules, ok := root["rules"].([]any)
	if !ok {
		return fail(path{"rules"}, "%s is not of type 'array'", repr(root["rules"]))
	}
	for i, r := range rules {
		p := path{"rules", i}
		rm, err := object(r, p, []string{"prefix", "group"}, []string{"prefix", "sni", "device", "group"})
		if err != nil {
			return err
		}
		for _, k := range sortedKeys(rm) {
			if _, ok := rm[k].(string); !ok {
				return fail(p.at(k), "%s is not of type 'string'", repr(rm[k]))
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
		return nil, fail(p, "%s is not of type 'object'", repr(v))
	}
	for _, k := range required {
		if _, ok := m[k]; !ok {
			return nil, fail(p, "'%s' is a required property", k)
		}
	}
	var extra []string
	for _, k := range sortedKeys(m) {
		if !containsStr(allowed, k) {
			extra = append(extra, "'"+k+"'")
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

func integer(v any, p path, minimum int64) error {
	n, ok := v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 64)
	if !ok || err != nil {
		if f, ferr := n.Float64(); !ok || ferr != nil || f != float64(int64(f)) {
			return fail(p, "%s is not of type 'integer'", repr(v))
		}
		i = int64(mustFloat(n))
	}
	if i < minimum {
		return fail(p, "%s is less than the minimum of %d", n, minimum)
	}
	return nil
}

func number(v any, p path) error {
	if _, ok := v.(json.Number); !ok {
		return fail(p, "%s is not of type 'number'", repr(v))
	}
	return nil
}

// numberRange checks lo (exclusive unless loIncl) and, when hasHi, hi
// (exclusive unless hiIncl... only exclusive is needed by the schema).
func numberRange(v any, p path, lo float64, loIncl bool, hi float64, hasHi bool) error {
	if err := number(v, p); err != nil {
		return err
	}
	f := mustFloat(v.(json.Number))
	if loIncl && f < lo {
		return fail(p, "%s is less than the minimum of %s", v, fmtNum(lo))
	}
	if !loIncl && f <= lo {
		return fail(p, "%s is less than or equal to the minimum of %s", v, fmtNum(lo))
	}
	if hasHi && f >= hi {
		return fail(p, "%s is greater than or equal to the maximum of %s", v, fmtNum(hi))
	}
	return nil
}

func pattern(v any, p path) error {
	s, ok := v.(string)
	if !ok {
		return fail(p, "%s is not of type 'string'", repr(v))
	}
	if !configIDPattern.MatchString(s) {
		return fail(p, "'%s' does not match '%s'", s, configIDSource)
	}
	return nil
}

func mustFloat(n json.Number) float64 {
	f, _ := n.Float64()
	return f
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func repr(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + x + "'"
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
