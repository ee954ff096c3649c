package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
)

// TestCLIBusBadInput: the --bus flags give exit status 2 and one line
// naming the flag.
func TestCLIBusBadInput(t *testing.T) {
	root := t.TempDir()
	pub := bustest.NewKey(t).PubFile
	busURL := "nats://127.0.0.1:1"
	base := []string{"--root", root, "--self-signed"}
	notCA := filepath.Join(root, "not-ca.pem")
	if err := os.WriteFile(notCA, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--bus", busURL}, "--table-pubkey is required with --bus"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--table", "http://127.0.0.1:1/v1/table"}, "not with --table or --telemetry"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--telemetry", "-"}, "not with --table or --telemetry"},
		{[]string{"--bus", "127.0.0.1:4222", "--table-pubkey", pub}, "--bus"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--pop", "Fra_1"}, `--pop "Fra_1"`},
		{[]string{"--pop", "fra"}, "--pop needs --bus"},
		{[]string{"--bus-user", "edge"}, "--bus-user needs --bus"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--bus-user", "edge"}, "--bus-user needs --bus-password-file"},
		{[]string{"--bus", busURL, "--table-pubkey", filepath.Join(root, "none.pem")}, "--table-pubkey"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--bus-user", "edge", "--bus-password-file", filepath.Join(root, "none.pw")}, "--bus-password-file"},
		{[]string{"--bus-ca", notCA}, "--bus-ca needs --bus"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--bus-ca", filepath.Join(root, "none.pem")}, "--bus-ca"},
		{[]string{"--bus", busURL, "--table-pubkey", pub, "--bus-ca", notCA}, "--bus-ca " + notCA + ": no PEM certificate"},
	}
	for _, c := range cases {
		args := append(append([]string{}, base...), c.args...)
		// bounded: a case the edge accepts would serve until killed
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, binary, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		last := lines[len(lines)-1]
		if code != 2 || !strings.HasPrefix(last, "tailor-edge: error: ") || !strings.Contains(last, c.want) || strings.Count(stderr.String(), "error:") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one error naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestCLIManagerDownAtStart: --table URL with the manager down starts on
// the built-in default (it used to exit 2).
func TestCLIManagerDownAtStart(t *testing.T) {
	p := startEdge(t, "--self-signed", "--table", "http://127.0.0.1:1/v1/table")
	p.stop(t)
}

// TestCLIBus: the edge starts with its bus unreachable and serves; when
// a server comes up it picks the tables up (push) and publishes telemetry.
func TestCLIBus(t *testing.T) {
	srv := bustest.Start(t, false)
	js, kv := srv.Setup(t)
	srv.Stop()
	k := bustest.NewKey(t)
	p := startEdge(t, "--self-signed", "--bus", srv.URL(), "--table-pubkey", k.PubFile, "--table-cache", t.TempDir(), "--pop", "lab")
	srv.Restart()
	ctx := context.Background()
	_, err := kv.Put(ctx, "cluster", bustest.Cluster(1))
	must(t, err)
	_, err = kv.Put(ctx, "part.0", k.Envelope(t, 0, bustest.Table(t, 21, "", nil)))
	must(t, err)
	waitTelemetry(t, js, p.Addr)
	p.stop(t)
}

// TestCLIBusTLS: with --bus-ca (and the edge user) the edge connects to a
// server that requires TLS and publishes its telemetry there.
func TestCLIBusTLS(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Auth: true, TLS: true})
	js, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	p := startEdge(t, "--self-signed", "--bus", srv.URL(), "--bus-ca", srv.CAFile(), "--bus-user", bustest.EdgeUser,
		"--bus-password-file", srv.PasswordFile(bustest.EdgeUser), "--table-pubkey", k.PubFile, "--pop", "lab")
	ctx := context.Background()
	_, err := kv.Put(ctx, "cluster", bustest.Cluster(1))
	must(t, err)
	_, err = kv.Put(ctx, "part.0", k.Envelope(t, 0, bustest.Table(t, 22, "", nil)))
	must(t, err)
	waitTelemetry(t, js, p.Addr)
	p.stop(t)
	if v := srv.Violations(); len(v) > 0 {
		t.Fatalf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// waitTelemetry fetches from the edge at addr until TAILOR_TELEMETRY
// holds a message (15 s at most).
func waitTelemetry(t *testing.T, js jetstream.JetStream, addr string) {
	t.Helper()
	ctx := context.Background()
	fetch(t, addr)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := js.Stream(ctx, "TAILOR_TELEMETRY")
		if err == nil {
			info, err := st.Info(ctx)
			if err == nil && info.State.Msgs > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no telemetry on the bus after 15 s")
		}
		time.Sleep(200 * time.Millisecond)
		fetch(t, addr)
	}
}

func fetch(t *testing.T, addr string) {
	t.Helper()
	out, err := exec.Command("curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("https://%s/data.bin", addr)).Output()
	if err != nil || string(out) != "200" {
		t.Fatalf("GET: %v %s", err, out)
	}
}
