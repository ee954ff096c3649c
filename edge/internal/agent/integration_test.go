package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		serveTest(os.Getenv(serverEnv))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func privileged(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("privileged namespace test: skipped under -short")
	case os.Geteuid() != 0:
		t.Skip("privileged namespace test: needs root (BPF, cgroups, netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("privileged namespace test: needs iproute2 (ip)")
	}
}

// testbed is two namespaces joined by a veth, clients in three /24s.
type testbed struct {
	srv, cli   string
	clients    []string // one source address per prefix
	serverAddr string
}

func newTestbed(t *testing.T) *testbed {
	srv, cli := netns.Names()
	tb := &testbed{srv: srv, cli: cli, serverAddr: "10.199.0.1", clients: []string{"10.199.1.2", "10.199.2.2", "10.199.3.2"}}
	for _, ns := range []string{srv, cli} {
		if err := netns.Add(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netns.Del(ns) })
	}
	vs, vc := fmt.Sprintf("tv%ds", os.Getpid()%100000), fmt.Sprintf("tv%dc", os.Getpid()%100000)
	sh(t, "ip", "link", "add", vs, "netns", srv, "type", "veth", "peer", "name", vc, "netns", cli)
	sh(t, "ip", "-n", srv, "addr", "add", tb.serverAddr+"/16", "dev", vs)
	for _, a := range tb.clients {
		sh(t, "ip", "-n", cli, "addr", "add", a+"/16", "dev", vc)
	}
	for ns, dev := range map[string]string{srv: vs, cli: vc} {
		sh(t, "ip", "-n", ns, "link", "set", dev, "up")
		if _, err := exec.LookPath("ethtool"); err == nil {
			sh(t, "ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
		} else {
			t.Logf("ethtool missing: veth offloads left on")
		}
	}
	return tb
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// dial connects from src (inside the client namespace) to dst. The dialing
// thread enters the namespace and goes back before it is unlocked, so no
// thread of the test process stays in a namespace that is later deleted.
func (tb *testbed) dial(t *testing.T, src, dst string) *net.TCPConn {
	t.Helper()
	var conn net.Conn
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, e := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err = e; e != nil {
			return // thread stays locked and exits with the goroutine
		}
		defer unix.Close(orig)
		if err = inNetns("/run/netns/"+tb.cli, func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
			conn, err = d.Dial("tcp", dst)
			return err
		}); err == nil && unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("dial %s from %s: %v", dst, src, err)
	}
	return conn.(*net.TCPConn)
}

func inNetns(path string, fn func() error) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return err
	}
	return fn()
}

// chanSink collects telemetry records for the test.
// startAgent opens and starts an agent whose Close runs at cleanup (after
// the servers the test started are killed); stop ends its event reader.
func startAgent(t *testing.T, cfg agent.Config) (*agent.Agent, *chanSink, func()) {
	t.Helper()
	a, err := agent.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	sink := &chanSink{}
	stop, err := a.Start(context.Background(), sink)
	if err != nil {
		t.Fatal(err)
	}
	return a, sink, stop
}

type chanSink struct {
	mu   sync.Mutex
	recs []telemetry.Record
}

func (s *chanSink) Add(r telemetry.Record)      { s.mu.Lock(); s.recs = append(s.recs, r); s.mu.Unlock() }
func (s *chanSink) Flush(context.Context) error { return nil }
func (s *chanSink) Dropped() int64              { return 0 }
func (s *chanSink) all() []telemetry.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]telemetry.Record(nil), s.recs...)
}

// startServer runs cmd inside the agent's cgroup and the server namespace.
func startServer(t *testing.T, a *agent.Agent, ns string, env []string, argv ...string) io.Reader {
	t.Helper()
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd, release, err := a.Command(argv...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	release()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitListen(t *testing.T, ns, port string) {
	waitFor(t, "listener on "+port, func() bool {
		out, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-Htln", "sport = :"+port).Output()
		return strings.TrimSpace(string(out)) != ""
	})
}

func writeTable(t *testing.T, path string, version int, configs []map[string]any) {
	t.Helper()
	b, err := json.Marshal(makeTable(version, configs))
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func reports(r io.Reader) chan sockReport {
	ch := make(chan sockReport, 256)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			var rep sockReport
			if json.Unmarshal(s.Bytes(), &rep) == nil {
				rep.CC = strings.TrimRight(rep.CC, "\x00")
				ch <- rep
			}
		}
		close(ch)
	}()
	return ch
}

func next(t *testing.T, ch chan sockReport, phase string) sockReport {
	t.Helper()
	for {
		select {
		case r := <-ch:
			if r.Phase == phase {
				return r
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s report from the test server", phase)
		}
	}
}

func cgroupCount(t *testing.T) int {
	ents, _ := filepath.Glob("/sys/fs/cgroup/unified/tailor-agent-*")
	return len(ents)
}

func replaceOnce(s, old, repl string) string { return strings.Replace(s, old, repl, 1) }
