package knobs

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestEmbeddedCopyMatchesSpec(t *testing.T) {
	spec, err := os.ReadFile("../../../spec/knobs.json")
	if err != nil {
		t.Skipf("spec/knobs.json not reachable from the test directory: %v", err)
	}
	if !bytes.Equal(spec, embedded) {
		t.Fatal("internal/knobs/knobs.json differs from spec/knobs.json: run `go generate ./internal/knobs`")
	}
}

func TestConfigIDMatchesPython(t *testing.T) {
	// Ids computed by tailor.space.Configuration (the configs of spec/vectors/decision-table/decide.json).
	cases := []struct {
		values string
		id     string
	}{
		{`{}`, "c-bf21a9e8fb"},
		{`{"http.version": "2", "tcp.congestion_control": "bbr", "tcp.initial_cwnd": 32}`, "c-bec6c7edcf"},
		{`{"tcp.initial_cwnd": 4, "tcp.rto_min_ms": 50}`, "c-682d37b1f9"},
		{`{"http2.max_concurrent_streams": 256, "tcp.congestion_control": "reno", "tcp.syn_rto_ms": 300}`, "c-54bc1a3350"},
		{`{"tcp.initial_cwnd": 10, "tcp.rto_min_ms": 200}`, "c-bf21a9e8fb"},
	}
	reg := mustDefault(t)
	for _, c := range cases {
		d := json.NewDecoder(strings.NewReader(c.values))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if got := reg.ConfigID(m); got != c.id {
			t.Errorf("ConfigID(%s) = %s, want %s", c.values, got, c.id)
		}
	}
}

func TestCheck(t *testing.T) {
	reg := mustDefault(t)
	cases := []struct {
		name  string
		value any
		want  string // substring of the error, "" = valid
	}{
		{"tcp.initial_cwnd", json.Number("32"), ""},
		{"tcp.initial_cwnd", json.Number("1000"), "outside [1, 256]"},
		{"tcp.initial_cwnd", json.Number("3.0"), "not an integer"},
		{"tcp.initial_cwnd", true, "not an integer"},
		{"tcp.congestion_control", "dctcp", "not one of ['cubic', 'bbr', 'reno']"},
		{"tcp.nodelay", json.Number("1"), "not a boolean"},
		{"tcp.timestamps", false, "host-wide"},
		{"tcp.nope", false, "unknown knob"},
	}
	for _, c := range cases {
		err := reg.CheckAssignment(map[string]any{c.name: c.value})
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s=%v: err %v, want %q", c.name, c.value, err, c.want)
		}
	}
}

func TestPyJSONEscapes(t *testing.T) {
	got := PyJSON(map[string]any{"b": "é<\"", "a": int64(1), "c": true})
	want := `{"a": 1, "b": "\u00e9<\"", "c": true}`
	if got != want {
		t.Fatalf("PyJSON = %s, want %s", got, want)
	}
}

func mustDefault(t *testing.T) *Registry {
	t.Helper()
	reg, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
