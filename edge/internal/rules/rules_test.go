package rules

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

const vectors = "../../../spec/vectors/decision-table/"

type resolveVectors struct {
	Table json.RawMessage `json:"table"`
	Cases []struct {
		Addr   string  `json:"addr"`
		U      float64 `json:"u"`
		SNI    string  `json:"sni"`
		Device string  `json:"device"`
		Group  *string `json:"group"`
		Config string  `json:"config"`
		P      float64 `json:"p"`
		Why    string  `json:"why"`
	} `json:"cases"`
}

func readVectors(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(vectors + name)
	if err != nil {
		t.Skipf("shared vectors not reachable: %v", err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

func registry(t *testing.T) *knobs.Registry {
	t.Helper()
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestResolveVectors(t *testing.T) {
	var v resolveVectors
	readVectors(t, "resolve.json", &v)
	table, err := Parse(v.Table, registry(t))
	if err != nil {
		t.Fatalf("vector table rejected: %v", err)
	}
	r := NewResolver(table)
	for _, c := range v.Cases {
		t.Run(c.Why, func(t *testing.T) {
			got := r.Resolve(Conn{Addr: netip.MustParseAddr(c.Addr), SNI: c.SNI, Device: c.Device}, c.U)
			want := Decision{Config: c.Config, P: c.P}
			if c.Group != nil {
				want.Group = *c.Group
			}
			if got.Group != want.Group || got.Config != want.Config || !near(got.P, want.P) {
				t.Fatalf("Resolve(%s, u=%v) = %+v, want %+v", c.Addr, c.U, got, want)
			}
		})
	}
}

func TestInvalidVectors(t *testing.T) {
	var v struct {
		Cases map[string]struct {
			Field    string          `json:"field"`
			Contains string          `json:"contains"`
			Table    json.RawMessage `json:"table"`
			Raw      *string         `json:"raw"`
		} `json:"cases"`
	}
	readVectors(t, "invalid.json", &v)
	names := make([]string, 0, len(v.Cases))
	for n := range v.Cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := v.Cases[name]
		t.Run(name, func(t *testing.T) {
			doc := []byte(c.Table)
			if c.Raw != nil {
				doc = []byte(*c.Raw)
			}
			if len(doc) == 0 {
				t.Fatal("case has neither table nor raw")
			}
			_, err := Parse(doc, registry(t))
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidTable) {
				t.Fatalf("want a *FieldError, got %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "field "+c.Field) || !strings.Contains(msg, c.Contains) {
				t.Fatalf("error %q does not name field %q with %q", msg, c.Field, c.Contains)
			}
		})
	}
}

func TestCompileDropsSNIAndDeviceRules(t *testing.T) {
	var v resolveVectors
	readVectors(t, "resolve.json", &v)
	table, err := Parse(v.Table, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(table, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Prefixes) != 3 || len(c.Ignored) != 2 {
		t.Fatalf("prefixes %v ignored %v: want 3 TCP-layer rules and 2 ignored", c.Prefixes, c.Ignored)
	}
	fast := c.Groups[0]
	if fast.Cum[0] != 0.75 || fast.Cum[1] != 1 || c.Configs[c.Default].ID != table.Default {
		t.Fatalf("group fast %+v / default %d", fast, c.Default)
	}
}

func TestCompileRejectsTooManyChoices(t *testing.T) {
	var v resolveVectors
	readVectors(t, "resolve.json", &v)
	table, err := Parse(v.Table, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < MaxChoices+1; i++ {
		table.Groups[1].Choices = append(table.Groups[1].Choices, Choice{Config: table.Default, P: 0})
	}
	var ue *UnsupportedError
	if _, err := Compile(table, registry(t)); !errors.As(err, &ue) || !strings.Contains(err.Error(), "groups[1].choices") {
		t.Fatalf("want UnsupportedError naming groups[1].choices, got %v", err)
	}
}

func TestParseExtraCases(t *testing.T) {
	cases := []struct{ name, mutate, field, contains string }{
		{"not json", "{", "(root)", "not JSON"},
		{"missing rules", `"rules"`, "(root)", "'rules' is a required property"},
		{"p zero", `"p": 0.25`, "groups[0].choices[1].p", "less than or equal to the minimum"},
		{"trailing data", "trailing", "(root)", "not JSON"},
		{"bare address", `"10.0.0.0/8"|"10.0.0.0"`, "rules[0].prefix", "is not a canonical prefix (write '10.0.0.0/32')"},
		{"garbage prefix", `"10.0.0.0/8"|"nope/8"`, "rules[0].prefix", "'nope/8' does not appear to be an IPv4 or IPv6 network"},
		{"netmask host bits", `"10.0.0.0/8"|"10.0.0.1/255.0.0.0"`, "rules[0].prefix", "has host bits set"},
		{"float version", `"version": 7|"version": 1e20`, "version", "greater than the maximum of 9007199254740991"},
		{"fractional version", `"version": 7|"version": 7.5`, "version", "is not of type 'integer'"},
		{"generated_at 1e999", `"generated_at": 1795000000.0|"generated_at": 1e999`, "generated_at", "greater than the maximum"},
		{"device control", `"device": "android"|"device": "a\u001b[31m"`, "rules[2].device", `'a\x1b[31m' does not match`},
	}
	var v resolveVectors
	readVectors(t, "resolve.json", &v)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := string(v.Table)
			switch c.mutate {
			case "{":
				doc = "{"
			case "trailing":
				doc += " {}"
			case `"rules"`:
				doc = strings.Replace(doc, `"rules"`, `"rulez"`, 1)
			default:
				if from, to, ok := strings.Cut(c.mutate, "|"); ok {
					if !strings.Contains(doc, from) {
						t.Fatalf("resolve.json has no %s", from)
					}
					doc = strings.Replace(doc, from, to, 1)
				} else {
					doc = strings.Replace(doc, c.mutate, `"p": 0`, 1)
				}
			}
			_, err := Parse([]byte(doc), registry(t))
			if err == nil || !strings.Contains(err.Error(), "field "+c.field) || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v, want field %s with %q", err, c.field, c.contains)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
