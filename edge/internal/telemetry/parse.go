package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ParseBatch decodes and validates a telemetry document from outside (the
// Go reading of the contract; the manager's is tailor.telemetry). Errors
// name the field like Batch.Validate: "telemetry: field <field>: <reason>".
// NaN and Infinity are not JSON; integers beyond int64 and numbers beyond
// float64 are out of the schema's range, reported on their field.
func ParseBatch(data []byte) (*Batch, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return nil, fieldErr("(root)", "not JSON: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fieldErr("(root)", "not JSON: data after the document")
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, fieldErr("(root)", "not of type 'object'")
	}
	// what the typed decode cannot show: out-of-range literals, and a
	// group given as "" (the Record's omitempty reads it as absent)
	if err := numberRange("dropped", root["dropped"]); err != nil {
		return nil, err
	}
	// the typed decode reads a null or absent list as empty, and a null
	// record as a zero one: the schema refuses all three
	raw, ok := root["records"]
	if !ok {
		return nil, fieldErr("(root)", "'records' is a required property")
	}
	recs, ok := raw.([]any)
	if !ok {
		return nil, fieldErr("records", "not of type 'array'")
	}
	for i, r := range recs {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fieldErr(fmt.Sprintf("records[%d]", i), "not of type 'object'")
		}
		for _, name := range sortedNames(m) {
			if err := numberRange(fmt.Sprintf("records[%d].%s", i, name), m[name]); err != nil {
				return nil, err
			}
		}
		if g, ok := m["group"].(string); ok && g == "" {
			return nil, fieldErr(fmt.Sprintf("records[%d].group", i), "'' should be non-empty")
		}
	}
	var b Batch
	td := json.NewDecoder(bytes.NewReader(data))
	td.DisallowUnknownFields()
	if err := td.Decode(&b); err != nil {
		return nil, fieldErr("(root)", "%v", err)
	}
	if _, ok := root["source"]; !ok {
		return nil, fieldErr("(root)", "'source' is a required property")
	}
	return &b, b.Validate()
}

// numberRange refuses a numeric literal no Go number holds: an integer
// beyond int64, or a number beyond float64 (every schema number has a
// smaller bound, so both are out of range).
func numberRange(field string, v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	s := string(n)
	neg := strings.HasPrefix(s, "-")
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return nil
	}
	f, _ := n.Float64()
	if strings.Trim(strings.TrimPrefix(s, "-"), "0123456789") == "" || math.IsInf(f, 0) {
		if neg {
			return fieldErr(field, "%s is less than the minimum of 0", s)
		}
		return fieldErr(field, "%s is greater than the maximum", s)
	}
	return nil
}

func sortedNames(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
