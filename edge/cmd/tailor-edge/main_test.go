package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// binary is the tailor-edge built once for all tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tailor-edge-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "tailor-edge")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// TestCLIBadInput: every bad flag or flag value gives exit status 2 and
// exactly one stderr line that names the flag and the reason.
func TestCLIBadInput(t *testing.T) {
	root := t.TempDir()
	badTable := filepath.Join(root, "bad.json")
	if err := os.WriteFile(badTable, []byte(`{"schema":"tailor.decision-table/v1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string // must appear in the one stderr line
	}{
		{[]string{"--nope"}, "-nope"},
		{[]string{"--poll=abc"}, `invalid value "abc" for flag -poll`},
		{[]string{"--poll=-1s", "--root", root, "--self-signed"}, "--poll -1s: must not be negative"},
		{[]string{"--root"}, "flag needs an argument: -root"},
		{[]string{"--listen=nohostport", "--root", root, "--self-signed"}, `--listen "nohostport": want HOST:PORT`},
		{[]string{"--telemetry=ftp://x", "--root", root, "--self-signed"}, "--telemetry"},
		{[]string{"--quic=maybe"}, "-quic"},
		{[]string{"--self-signed"}, "--root or --upstream is required"},
		{[]string{"--root", root}, "--cert/--key or --self-signed"},
		{[]string{"--root", root, "--cert", "c.pem"}, "--cert and --key go together"},
		{[]string{"--root", root, "--self-signed", "--device-map", filepath.Join(root, "none.json")}, "--device-map"},
		{[]string{"--root", root, "--self-signed", "--table", filepath.Join(root, "none.json")}, "none.json"},
		{[]string{"--root", root, "--self-signed", "--table", badTable}, "decision table field"},
		{[]string{"--root", root, "--self-signed", "--upstream", "not a url"}, "--upstream"},
		{[]string{"--root", root, "--self-signed", "stray"}, `unexpected argument "stray"`},
		{[]string{"--root", root, "--self-signed", "--metrics", "9100"}, `--metrics "9100": want HOST:PORT`},
		{[]string{"--root", root, "--self-signed", "--metrics", "256.0.0.1:9100"}, "--metrics 256.0.0.1:9100"},
		{[]string{"--root", root, "--self-signed", "--geoip-asn", filepath.Join(root, "none.mmdb")}, "--geoip-asn " + filepath.Join(root, "none.mmdb")},
		{[]string{"--root", root, "--self-signed", "--geoip-region", badTable}, "--geoip-region " + badTable},
	}
	for _, c := range cases {
		cmd := exec.Command(binary, c.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "tailor-edge: error: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestCLIHelp: --help prints the usage with every flag and exits 0.
func TestCLIHelp(t *testing.T) {
	out, err := exec.Command(binary, "--help").Output()
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"usage: tailor-edge", "-listen", "-root", "-quic", "-device-map", "-table", "-telemetry", "-self-signed"} {
		if !bytes.Contains(out, []byte(f)) {
			t.Errorf("--help output lacks %q:\n%s", f, out)
		}
	}
}

// edgeProc is a running tailor-edge binary.
type edgeProc struct {
	cmd    *exec.Cmd
	Addr   string // 127.0.0.1:PORT
	Port   string
	Root   string // the --root directory
	mu     sync.Mutex
	stdout bytes.Buffer // telemetry with --telemetry -
	done   chan error
}

var servingRE = regexp.MustCompile(`serving https://(\S+) table version`)

// startEdge runs the binary on 127.0.0.1:0 with args and a www root holding
// index.html and data.bin (100000 bytes); stopped by SIGTERM at cleanup.
func startEdge(t *testing.T, args ...string) *edgeProc {
	t.Helper()
	root := filepath.Join(t.TempDir(), "www")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "index.html"), []byte("<html><body><p id=x>tailor edge page</p></body></html>"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "data.bin"), make([]byte, 100000), 0o644))
	p := &edgeProc{done: make(chan error, 1), Root: root}
	p.cmd = exec.Command(binary, append([]string{"--listen", "127.0.0.1:0", "--root", root}, args...)...)
	p.cmd.Stdout = writerFunc(func(b []byte) (int, error) { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.Write(b) })
	stderr, err := p.cmd.StderrPipe()
	must(t, err)
	must(t, p.cmd.Start())
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
			t.Log("tailor-edge: " + sc.Text())
		}
	}()
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.Addr = <-addr:
	case err := <-p.done:
		t.Fatalf("tailor-edge exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("tailor-edge did not start in 10 s")
	}
	p.Port = p.Addr[strings.LastIndex(p.Addr, ":")+1:]
	return p
}

// stop sends SIGTERM (the server flushes telemetry) and waits; idempotent.
func (p *edgeProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("tailor-edge exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Error("tailor-edge did not stop on SIGTERM")
	}
}

// records stops the server and returns its telemetry records (validated).
func (p *edgeProc) records(t *testing.T) []telemetry.Record {
	t.Helper()
	p.stop(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	var recs []telemetry.Record
	sc := bufio.NewScanner(bytes.NewReader(p.stdout.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var b telemetry.Batch
		must(t, json.Unmarshal(sc.Bytes(), &b))
		must(t, b.Validate())
		recs = append(recs, b.Records...)
	}
	return recs
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

var _ io.Writer = writerFunc(nil)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
