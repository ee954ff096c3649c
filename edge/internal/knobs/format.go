package knobs

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Full returns every per-connection knob's value: the registry default
// overridden by values (which must have passed CheckAssignment).
func (r *Registry) Full(values map[string]any) map[string]any {
	out := map[string]any{}
	for name, k := range r.Knobs {
		if k.PerConnection() {
			out[name] = k.Default
		}
	}
	for name, v := range values {
		out[name], _ = Normalize(v)
	}
	return out
}

// ConfigID is tailor.space.Configuration.id: "c-" + the first 10 hex digits
// of sha1(json.dumps(changed, sort_keys=True)) over the knobs that differ
// from their defaults.
func (r *Registry) ConfigID(values map[string]any) string {
	changed := map[string]any{}
	for name, v := range r.Full(values) {
		if v != r.Knobs[name].Default {
			changed[name] = v
		}
	}
	sum := sha1.Sum([]byte(PyJSON(changed)))
	return "c-" + hex.EncodeToString(sum[:])[:10]
}

// PyJSON encodes a flat map like Python's json.dumps(sort_keys=True) with
// the default separators and ensure_ascii.
func PyJSON(m map[string]any) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyString(k) + ": " + pyValue(m[k]))
	}
	b.WriteString("}")
	return b.String()
}

func pyValue(v any) string {
	switch x := v.(type) {
	case string:
		return pyString(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(v)
}

var pyEscapes = map[rune]string{'"': `\"`, '\\': `\\`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\b': `\b`, '\f': `\f`}

func pyString(s string) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case pyEscapes[c] != "":
			b.WriteString(pyEscapes[c])
		case c < 0x20 || (c > 0x7e && c < 0x10000):
			fmt.Fprintf(&b, `\u%04x`, c)
		case c >= 0x10000:
			r1, r2 := utf16.EncodeRune(c)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pyRepr formats a value the way Python's repr shows it in messages.
func pyRepr(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + x + "'"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	}
	return fmt.Sprint(v)
}

func pyList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = "'" + x + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
