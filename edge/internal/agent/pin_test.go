package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
