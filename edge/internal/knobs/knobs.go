// Package knobs is the Go view of the knob registry spec/knobs.json: the
// names, types, bounds and apply lists every other edge package reads.
// knobs.json here is a byte copy refreshed by `go generate`; a test fails
// when it drifts from spec/knobs.json.
package knobs

//go:generate cp ../../../spec/knobs.json knobs.json

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// ErrKnob prefixes every registry and value error.
var ErrKnob = errors.New("knob")

//go:embed knobs.json
var embedded []byte

// Knob is one tunable setting.
type Knob struct {
	Name    string   `json:"name"`
	Layer   string   `json:"layer"`
	Type    string   `json:"type"` // categorical | integer | boolean
	Values  []string `json:"values"`
	Bounds  []int64  `json:"bounds"`
	Default any      `json:"default"`
	Apply   []string `json:"apply"`
	Unit    string   `json:"unit"`
}

// Registry is every knob by name.
type Registry struct {
	Knobs map[string]*Knob
	Order []string // registry order
}

var perConnection = map[string]bool{"sockops": true, "setsockopt": true, "route": true, "edge": true, "edge-quic": true}

var (
	defaultOnce sync.Once
	defaultReg  *Registry
	defaultErr  error
)

// Default returns the registry compiled into the binary.
func Default() (*Registry, error) {
	defaultOnce.Do(func() { defaultReg, defaultErr = Parse(embedded) })
	return defaultReg, defaultErr
}

// Parse reads a knob registry document.
func Parse(data []byte) (*Registry, error) {
	var raw struct {
		Knobs []json.RawMessage `json:"knobs"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: registry: %v", ErrKnob, err)
	}
	r := &Registry{Knobs: map[string]*Knob{}}
	for _, m := range raw.Knobs {
		k, err := parseKnob(m)
		if err != nil {
			return nil, err
		}
		r.Knobs[k.Name] = k
		r.Order = append(r.Order, k.Name)
	}
	return r, nil
}

func parseKnob(m json.RawMessage) (*Knob, error) {
	d := json.NewDecoder(bytesReader(m))
	d.UseNumber()
	k := &Knob{}
	if err := d.Decode(k); err != nil {
		return nil, fmt.Errorf("%w: registry: %v", ErrKnob, err)
	}
	if k.Type == "integer" && len(k.Bounds) != 2 {
		return nil, fmt.Errorf("%w: registry: %s has no bounds", ErrKnob, k.Name)
	}
	if err := k.Check(k.Default); err != nil {
		return nil, fmt.Errorf("%w: registry default: %v", ErrKnob, err)
	}
	k.Default, _ = Normalize(k.Default)
	return k, nil
}

// PerConnection reports whether the knob can be set per connection anywhere.
func (k *Knob) PerConnection() bool {
	for _, a := range k.Apply {
		if perConnection[a] {
			return true
		}
	}
	return false
}

// AppliesAt reports whether the knob lists where in its apply list.
func (k *Knob) AppliesAt(where string) bool {
	for _, a := range k.Apply {
		if a == where {
			return true
		}
	}
	return false
}

// Check returns nil if value (string, bool, int64 or json.Number) is valid
// for the knob; the message mirrors tailor.space.knobs.Knob.check.
func (k *Knob) Check(value any) error {
	switch k.Type {
	case "categorical":
		s, ok := value.(string)
		if !ok || !contains(k.Values, s) {
			return fmt.Errorf("knob '%s': value %s is not one of %s", k.Name, pyRepr(value), pyList(k.Values))
		}
	case "boolean":
		if _, ok := value.(bool); !ok {
			return fmt.Errorf("knob '%s': value %s is not a boolean", k.Name, pyRepr(value))
		}
	default:
		n, ok := Int(value)
		if !ok {
			if bigIntLiteral(value) { // an integer, just beyond int64 (Python's ints are unbounded)
				return fmt.Errorf("knob '%s': value %s is outside [%d, %d]", k.Name, value, k.Bounds[0], k.Bounds[1])
			}
			return fmt.Errorf("knob '%s': value %s is not an integer", k.Name, pyRepr(value))
		}
		if n < k.Bounds[0] || n > k.Bounds[1] {
			return fmt.Errorf("knob '%s': value %d is outside [%d, %d]", k.Name, n, k.Bounds[0], k.Bounds[1])
		}
	}
	return nil
}

// Get returns the knob called name or an error naming the known knobs.
func (r *Registry) Get(name string) (*Knob, error) {
	if k, ok := r.Knobs[name]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown knob '%s'", name)
}

// CheckAssignment validates every value of a per-connection assignment.
func (r *Registry) CheckAssignment(values map[string]any) error {
	for _, name := range sortedKeys(values) {
		k, err := r.Get(name)
		if err != nil {
			return err
		}
		if !k.PerConnection() {
			return fmt.Errorf("knob '%s' is host-wide only (%s); it cannot be set per connection", name, pyList(k.Apply))
		}
		if err := k.Check(values[name]); err != nil {
			return err
		}
	}
	return nil
}

// Int converts an integer JSON value (int64, int or integral json.Number
// without a fraction or exponent) to int64.
func Int(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	}
	return 0, false
}

// bigIntLiteral: a json.Number integer literal (digits, optional minus)
// too large for int64.
func bigIntLiteral(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	s := strings.TrimPrefix(string(n), "-")
	return s != "" && len(s) <= 4096 && strings.Trim(s, "0123456789") == ""
}

// Normalize turns json.Number integers into int64 so values compare with ==.
func Normalize(v any) (any, bool) {
	if n, ok := v.(json.Number); ok {
		i, ok := Int(n)
		return i, ok
	}
	return v, true
}
