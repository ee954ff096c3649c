package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
)

// TestPinnedRestartKeepsTuning: with --pin, tuning survives the agent, a
// new agent takes over the pinned maps and link, and Cleanup removes all.
func TestPinnedRestartKeepsTuning(t *testing.T) {
	privileged(t)
	dir := t.TempDir()
	pin, table := filepath.Join(dir, "bpffs"), filepath.Join(dir, "table.json")
	cgroup := fmt.Sprintf("tailor-agent-pintest-%d", os.Getpid())
	cgroupPath := filepath.Join("/sys/fs/cgroup/unified", cgroup)
	t.Cleanup(func() {
		if err := agent.Cleanup(pin, cgroupPath); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if _, err := os.Stat(pin); !os.IsNotExist(err) {
			t.Errorf("pin dir %s left behind", pin)
		}
		if _, err := os.Stat(cgroupPath); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind", cgroupPath)
		}
	})
	loopback := []map[string]any{{}, {"tcp.congestion_control": "reno", "tcp.initial_cwnd": int64(20)}}
	writeLoopbackTable(t, table, 1, loopback)
	cfg := agent.Config{Table: table, Pin: pin, Cgroup: cgroup, Poll: time.Hour, Log: testLog{t}}
	a1 := openStarted(t, cfg)
	addr := "127.0.0.1:" + fmt.Sprint(20000+os.Getpid()%20000)
	srv := reports(startServer(t, a1.Agent, "", []string{serverEnv + "=" + addr}, os.Args[0], "-test.run=^$"))
	waitFor(t, "loopback listener", func() bool { c, err := net.Dial("tcp", addr); _ = closeIf(c); return err == nil })
	next(t, srv, "accept")
	check := func(what, cc string, cwnd uint32) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if r := next(t, srv, "accept"); r.CC != cc || r.Cwnd != cwnd {
			t.Errorf("%s: cc=%s cwnd=%d, want %s %d", what, r.CC, r.Cwnd, cc, cwnd)
		}
	}
	check("agent 1", "reno", 20)
	a1.stop()
	check("no agent running (pinned link and maps)", "reno", 20)
	loopback[1] = map[string]any{"tcp.congestion_control": "bbr", "tcp.initial_cwnd": int64(8)}
	writeLoopbackTable(t, table, 2, loopback)
	a2 := openStarted(t, cfg)
	check("agent 2 with a new table", "bbr", 8)
	a2.stop()
}

type started struct {
	*agent.Agent
	stopFn func()
}

func (s started) stop() {
	s.stopFn()
	_ = s.Close()
}

func openStarted(t *testing.T, cfg agent.Config) started {
	a, err := agent.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := a.Start(context.Background(), &chanSink{})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return started{a, stop}
}

func writeLoopbackTable(t *testing.T, path string, version int, configs []map[string]any) {
	writeTable(t, path, version, configs)
	b, _ := os.ReadFile(path)
	b = []byte(replaceOnce(string(b), "10.199.1.0/24", "127.0.0.0/8"))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func closeIf(c net.Conn) error {
	if c != nil {
		return c.Close()
	}
	return nil
}

// TestPinNeedsItsCgroup: --pin without --cgroup is refused (each run would
// make its own tailor-agent-<pid> cgroup, and a restart would swap its
// program into the old run's pinned link, tuning a cgroup the new server
// is not in), and so is a pinned link attached to another cgroup than the
// one named (found by review, 2026-12-07: the restarted agent reported
// tuning while the server's connections were untuned).
func TestPinNeedsItsCgroup(t *testing.T) {
	privileged(t)
	dir := t.TempDir()
	pin := filepath.Join(dir, "bpffs")
	if a, err := agent.Open(agent.Config{Pin: pin, Log: testLog{t}}); err == nil {
		_ = a.Close()
		_ = agent.Cleanup(pin, a.CgroupPath())
		t.Fatal("--pin without --cgroup: accepted")
	} else if !strings.Contains(err.Error(), "--pin needs --cgroup") {
		t.Fatalf("--pin without --cgroup: %v", err)
	}
	first := fmt.Sprintf("tailor-agent-pintest-a-%d", os.Getpid())
	other := fmt.Sprintf("tailor-agent-pintest-b-%d", os.Getpid())
	root := "/sys/fs/cgroup/unified"
	t.Cleanup(func() {
		if err := agent.Cleanup(pin, filepath.Join(root, first)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, cg := range []string{first, other} {
			if _, err := os.Stat(filepath.Join(root, cg)); !os.IsNotExist(err) {
				_ = os.Remove(filepath.Join(root, cg))
				t.Errorf("cgroup %s left behind", cg)
			}
		}
	})
	a, err := agent.Open(agent.Config{Pin: pin, Cgroup: first, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	_, err = agent.Open(agent.Config{Pin: pin, Cgroup: other, Log: testLog{t}})
	if err == nil || !strings.Contains(err.Error(), "attached to another cgroup") {
		t.Fatalf("a pinned link of %s reused for %s: %v", first, other, err)
	}
	a, err = agent.Open(agent.Config{Pin: pin, Cgroup: first, Log: testLog{t}}) // the same cgroup again: reused
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
}

// TestGroupOfAConnectionThatOutlivesManyTables: a connection's record names
// the group of the table it was decided with, however many tables were
// installed while it was open (until 2026-12-07 the agent remembered 16, and
// such a record had no group; found by review).
func TestGroupOfAConnectionThatOutlivesManyTables(t *testing.T) {
	privileged(t)
	dir := t.TempDir()
	table := filepath.Join(dir, "table.json")
	loopback := []map[string]any{{}, {"tcp.congestion_control": "reno", "tcp.initial_cwnd": int64(20)}}
	writeLoopbackTable(t, table, 1, loopback)
	a, sink, stop := startAgent(t, agent.Config{Table: table, Poll: time.Hour, FlushEvery: 20 * time.Millisecond, Log: testLog{t}})
	addr := "127.0.0.1:" + fmt.Sprint(20000+(os.Getpid()+7)%20000)
	srv := reports(startServer(t, a, "", []string{serverEnv + "=" + addr}, os.Args[0], "-test.run=^$"))
	waitFor(t, "loopback listener", func() bool { c, err := net.Dial("tcp", addr); _ = closeIf(c); return err == nil })
	next(t, srv, "accept")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if r := next(t, srv, "accept"); r.CC != "reno" {
		t.Fatalf("cc=%s, want reno", r.CC)
	}
	base, _ := os.ReadFile(table)
	for v := 2; v <= 40; v++ {
		doc := strings.ReplaceAll(strings.Replace(string(base), `"version":1`, fmt.Sprintf(`"version":%d`, v), 1), `"g1"`, fmt.Sprintf(`"g1-v%d"`, v))
		if _, err := a.Load([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	next(t, srv, "close")
	waitFor(t, "two records", func() bool { return len(sink.all()) >= 2 })
	time.Sleep(200 * time.Millisecond)
	stop()
	n := 0
	for _, r := range sink.all() {
		if r.TableVersion == 1 {
			n++
			if r.Group != "g1" {
				t.Errorf("a connection decided under table 1 named group %q, want g1", r.Group)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d records of table 1, want 2 (the probe and the long connection)", n)
	}
}
