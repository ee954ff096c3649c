package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/config"
)

// These cases must fail validation before anything is created, so they
// run unprivileged.
func TestValidationExitCode2(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.json")
	if err := os.WriteFile(cfg, []byte(`{"down": {"loss": 1.5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := []string{"--srv-ns", "a", "--cli-ns", "b"}
	cases := []struct {
		args []string
		want string
	}{
		{append([]string{"--delay", "-5"}, ns...), "down.delay_ms"},
		{append([]string{"--down-rate-mbit", "0"}, ns...), "down.rate_mbit (--down-rate-mbit): must be > 0"},
		{append([]string{"--up-loss", "1"}, ns...), "up.loss"},
		{append([]string{"--queue-packets", "0"}, ns...), "queue_packets"},
		{append([]string{"--down-trace", filepath.Join(dir, "none")}, ns...), "down.trace"},
		{append([]string{"--config", cfg}, ns...), "down.loss (--down-loss): must be in [0, 1), got 1.5"},
		{[]string{"--delay", "10"}, "srv_ns/cli_ns"},
		{append([]string{"--delay", "abc"}, ns...), "invalid value \"abc\" for flag -delay"},
		{[]string{"run", "--delay", "1"}, "client_cmd (--client-cmd): required"},
		{[]string{"run", "--client-cmd", "true", "--up-rate-mbit", "-1"}, "up.rate_mbit"},
		{[]string{"run", "--client-cmd", "true", "--config", filepath.Join(dir, "missing.json")}, "config file"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q, want %q", c.args, errb.String(), c.want)
		}
	}
}

func TestFlagsOverrideConfigFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(cfg, []byte(`{"delay_ms": 10, "down": {"rate_mbit": 5}, "srv_ns": "x", "cli_ns": "y"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&errb)
	c := parse(fs, &config.File{}, []string{"--config", cfg, "--down-rate-mbit", "7"}, true, &errb)
	if c == nil {
		t.Fatalf("parse failed: %s", errb.String())
	}
	if c.Down.RateBps != 7e6 || c.Down.DelayNs != 10e6 || c.SrvNS != "x" {
		t.Fatalf("config %+v", c)
	}
}
