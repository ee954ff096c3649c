package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
)

// TestAgentReceiveBufferAndCwndClamp: the sock_ops program applies
// tcp.rcvbuf_bytes (SO_RCVBUF) and tcp.cwnd_clamp (TCP_BPF_SNDCWND_CLAMP)
// per prefix. The Go test server under the agent reads them back from its
// own sockets: SO_RCVBUF (doubled by the kernel), TCP_INFO's ssthresh (the
// kernel sets it to the clamp) and cwnd at accept (the first flight: the
// program lowers a larger initial window to the clamp) and after sending
// 64 KiB (slow start would take an unclamped window past 40 segments on
// the veth; the clamp holds it).
func TestAgentReceiveBufferAndCwndClamp(t *testing.T) {
	privileged(t)
	before := cgroupCount(t)
	dir := t.TempDir()
	table := filepath.Join(dir, "table.json")
	writeTable(t, table, 1, []map[string]any{{},
		{"tcp.rcvbuf_bytes": int64(65536)}, // no clamp: the control
		{"tcp.cwnd_clamp": int64(6), "tcp.initial_cwnd": int64(16), "tcp.rcvbuf_bytes": int64(32768)},
		{"tcp.cwnd_clamp": int64(8)}, // the kernel's IW 10 is lowered to 8
	})
	var cgroup string
	t.Cleanup(func() { assertClean(t, cgroup, before) })
	tb := newTestbed(t)
	a, _, stop := startAgent(t, agent.Config{Table: table, Poll: 100 * time.Millisecond, Log: testLog{t}})
	cgroup = a.CgroupPath()
	srv := reports(startServer(t, a, tb.srv, []string{serverEnv + "=" + tb.serverAddr + ":8080"}, os.Args[0], "-test.run=^$"))
	waitListen(t, tb.srv, "8080")
	cases := []struct {
		name                string
		rcvbuf              int    // SO_RCVBUF read back
		first, ssthresh     uint32 // cwnd and ssthresh at accept (0: not checked)
		maxCwnd, minCwndEnd uint32 // bounds on cwnd after 64 KiB
	}{
		{"rcvbuf 64 KiB, no clamp", 2 * 65536, 10, 0, 1 << 30, 20},
		{"clamp 6 over iw 16, rcvbuf 32 KiB", 2 * 32768, 6, 6, 6, 1},
		{"clamp 8 over the kernel's iw 10", 0, 8, 8, 8, 1},
	}
	for i, c := range cases {
		conn := tb.dial(t, tb.clients[i], tb.serverAddr+":8080")
		acc := next(t, srv, "accept")
		buf := make([]byte, 64<<10)
		for n := 0; n < 64<<10; {
			m, err := conn.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
		conn.Close()
		cl := next(t, srv, "close")
		t.Logf("%s (client %s): accept cwnd %d ssthresh %d rcvbuf %d; after 64 KiB cwnd %d", c.name, tb.clients[i],
			acc.Cwnd, acc.Ssthresh, acc.RcvBuf, cl.Cwnd)
		if c.rcvbuf != 0 && acc.RcvBuf != c.rcvbuf {
			t.Errorf("%s: SO_RCVBUF %d, want %d", c.name, acc.RcvBuf, c.rcvbuf)
		}
		if acc.Cwnd != c.first || (c.ssthresh != 0 && acc.Ssthresh != c.ssthresh) {
			t.Errorf("%s: first cwnd %d ssthresh %d, want %d and %d", c.name, acc.Cwnd, acc.Ssthresh, c.first, c.ssthresh)
		}
		if cl.Cwnd > c.maxCwnd || cl.Cwnd < c.minCwndEnd {
			t.Errorf("%s: cwnd %d after 64 KiB, want in [%d, %d]", c.name, cl.Cwnd, c.minCwndEnd, c.maxCwnd)
		}
	}
	// ss sees the receive buffer (rb<bytes>), cwnd and ssthresh of a connection.
	conn := tb.dial(t, tb.clients[1], tb.serverAddr+":8080")
	defer conn.Close()
	next(t, srv, "accept")
	time.Sleep(100 * time.Millisecond)
	out := sh(t, "ip", "netns", "exec", tb.srv, "ss", "-Htinm", "( sport = :8080 )") // FIN-WAIT after the server's CloseWrite
	line := ssLine(out, tb.clients[1])
	t.Logf("ss -tinm: %s", strings.Join(strings.Fields(line), " "))
	if !strings.Contains(line, "rb65536,") || !strings.Contains(line, "cwnd:6 ") || !strings.Contains(line, "ssthresh:6 ") {
		t.Errorf("ss line %q: want rb65536, cwnd:6 and ssthresh:6", line)
	}
	stop()
	st, _ := a.Stats()
	if len(st.ApplyErrors) != 0 {
		t.Errorf("apply errors %v", st.ApplyErrors)
	}
}
