package agent_test

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// makeTable builds a table: configs[0] is the default, configs[i] serves
// 10.199.i.0/24.
func makeTable(version int, configs []map[string]any) map[string]any {
	reg, _ := knobs.Default()
	ids := make([]string, len(configs))
	cfgs := map[string]any{}
	for i, c := range configs {
		ids[i] = reg.ConfigID(c)
		cfgs[ids[i]] = c
	}
	var groups, rules []map[string]any
	for i := 1; i < len(configs); i++ {
		g := "g" + strconv.Itoa(i)
		groups = append(groups, map[string]any{"id": g, "choices": []map[string]any{{"config": ids[i], "p": 1.0}}})
		rules = append(rules, map[string]any{"prefix": "10.199." + strconv.Itoa(i) + ".0/24", "group": g})
	}
	return map[string]any{"schema": "tailor.decision-table/v1", "version": version, "generated_at": 0.0,
		"default": ids[0], "configs": cfgs, "groups": groups, "rules": rules}
}

// want is what the server side must see per prefix.
type want struct {
	cc     string
	cwnd   uint32
	sndbuf int // SO_SNDBUF as read back (the kernel doubles the value set)
}

var (
	tableV1 = []map[string]any{{},
		{"tcp.congestion_control": "reno", "tcp.initial_cwnd": int64(4), "tcp.sndbuf_bytes": int64(65536)},
		{"tcp.congestion_control": "bbr", "tcp.initial_cwnd": int64(32), "tcp.sndbuf_bytes": int64(262144), "tcp.rto_min_ms": int64(50)},
		{"tcp.initial_cwnd": int64(16), "tcp.sndbuf_bytes": int64(131072), "tcp.nodelay": true, "tcp.syn_rto_ms": int64(300)},
	}
	wantV1 = []want{{"reno", 4, 131072}, {"bbr", 32, 524288}, {"cubic", 16, 262144}}
)

func TestAgentEndToEnd(t *testing.T) {
	privileged(t)
	before := cgroupCount(t)
	dir := t.TempDir()
	table := filepath.Join(dir, "table.json")
	writeTable(t, table, 1, tableV1)
	var cgroup string
	t.Cleanup(func() { assertClean(t, cgroup, before) }) // runs last
	tb := newTestbed(t)
	a, sink, stop := startAgent(t, agent.Config{Table: table, Poll: 100 * time.Millisecond, FullAddress: true, Log: testLog{t}})
	cgroup = a.CgroupPath()
	srv := reports(startServer(t, a, tb.srv, []string{serverEnv + "=" + tb.serverAddr + ":8080"}, os.Args[0], "-test.run=^$"))
	waitListen(t, tb.srv, "8080")
	conns := 0
	exchange := func(t *testing.T, i int) (sockReport, sockReport) {
		c := tb.dial(t, tb.clients[i], tb.serverAddr+":8080")
		acc := next(t, srv, "accept")
		buf := make([]byte, 64<<10)
		for n := 0; n < 64<<10; {
			m, err := c.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
		c.Close()
		conns++
		return acc, next(t, srv, "close")
	}
	var closes []sockReport
	t.Run("three prefixes get three configurations", func(t *testing.T) {
		for i, w := range wantV1 {
			acc, cl := exchange(t, i)
			closes = append(closes, cl)
			if acc.CC != w.cc || acc.Cwnd != w.cwnd || acc.SndBuf != w.sndbuf {
				t.Errorf("client %s: cc=%s cwnd=%d sndbuf=%d, want %+v", tb.clients[i], acc.CC, acc.Cwnd, acc.SndBuf, w)
			}
		}
	})
	t.Run("nginx sees the same configurations (ss -tinm)", func(t *testing.T) {
		conns += checkNginx(t, a, tb)
	})
	t.Run("a table update changes the next connection", func(t *testing.T) {
		v2 := append([]map[string]any{}, tableV1...)
		v2[1] = map[string]any{"tcp.congestion_control": "bbr", "tcp.initial_cwnd": int64(8)}
		writeTable(t, table, 2, v2)
		waitFor(t, "table version 2", func() bool { return a.Version() == 2 })
		acc, cl := exchange(t, 0)
		closes = append(closes, cl)
		if acc.CC != "bbr" || acc.Cwnd != 8 {
			t.Fatalf("after update: cc=%s cwnd=%d, want bbr 8", acc.CC, acc.Cwnd)
		}
	})
	t.Run("an invalid table is rejected and the old one kept", func(t *testing.T) {
		bad := append([]map[string]any{}, tableV1...)
		bad[1] = map[string]any{"tcp.initial_cwnd": int64(1000)}
		writeTable(t, table, 3, bad)
		waitFor(t, "rejection", func() bool { return a.LastError() != nil })
		if err := a.LastError(); !strings.Contains(err.Error(), "outside [1, 256]") || a.Version() != 2 {
			t.Fatalf("version %d, error %v: want version 2 kept and a bounds error", a.Version(), err)
		}
		acc, cl := exchange(t, 0)
		closes = append(closes, cl)
		if acc.CC != "bbr" || acc.Cwnd != 8 {
			t.Fatalf("after invalid table: cc=%s cwnd=%d, want bbr 8 (table 2)", acc.CC, acc.Cwnd)
		}
	})
	t.Run("one telemetry event per connection, matching TCP_INFO", func(t *testing.T) {
		waitFor(t, "telemetry events", func() bool { return len(sink.all()) >= conns })
		time.Sleep(300 * time.Millisecond)
		recs := sink.all()
		if len(recs) != conns {
			t.Fatalf("%d telemetry records for %d connections", len(recs), conns)
		}
		checkTelemetry(t, recs, closes)
	})
	stop()
	st, _ := a.Stats()
	t.Logf("agent stats: %s", st)
	if len(st.ApplyErrors) != 0 || st.EventsLost != 0 || st.PendingHit == 0 {
		t.Errorf("apply errors %v, lost %d, TIMEOUT_INIT draws reused %d (want > 0: a config sets syn_rto)", st.ApplyErrors, st.EventsLost, st.PendingHit)
	}
}

func checkTelemetry(t *testing.T, recs []telemetry.Record, closes []sockReport) {
	for _, cl := range closes {
		found := false
		for _, r := range recs {
			if r.ClientAddr == cl.Remote && r.CongestionControl == cl.CC && *r.MSS == int64(cl.MSS) &&
				math.Abs(float64(*r.BytesAcked)-float64(cl.BytesAcked)) <= 2 && *r.Retransmits >= int64(cl.Retrans) {
				found = true
			}
		}
		if !found {
			t.Errorf("no telemetry record matches server TCP_INFO %+v", cl)
		}
	}
	for _, r := range recs {
		if r.TableVersion < 1 || *r.DurationMs <= 0 || r.Group == "" || r.ClientAddr == "" {
			t.Errorf("implausible record %+v", r)
		}
	}
}

func checkNginx(t *testing.T, a *agent.Agent, tb *testbed) int {
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx not installed (apt-get install -y nginx)")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	text := "daemon off; master_process off; worker_processes 1; pid " + dir + "/nginx.pid; error_log " + dir + "/error.log;\n" +
		"events {} http { access_log off; server { listen " + tb.serverAddr + ":80; location / { return 200 ok; } } }\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	startServer(t, a, tb.srv, nil, "nginx", "-p", dir, "-c", conf)
	waitListen(t, tb.srv, "80")
	for i := range wantV1 {
		c := tb.dial(t, tb.clients[i], tb.serverAddr+":80")
		defer c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	out := sh(t, "ip", "netns", "exec", tb.srv, "ss", "-Htinm", "state", "established", "( sport = :80 )")
	for i, w := range wantV1 {
		line := ssLine(out, tb.clients[i])
		tbuf := "tb" + strconv.Itoa(w.sndbuf)
		if !strings.Contains(line, " "+w.cc+" ") || !strings.Contains(line, "cwnd:"+strconv.Itoa(int(w.cwnd))+" ") || !strings.Contains(line, tbuf) {
			t.Errorf("nginx conn from %s: want %s cwnd:%d %s in %q", tb.clients[i], w.cc, w.cwnd, tbuf, line)
		}
	}
	return len(wantV1)
}

// ssLine joins the two-line ss record of the connection from peer.
func ssLine(out, peer string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, peer+":") && i+1 < len(lines) {
			return l + " " + lines[i+1] + " "
		}
	}
	return ""
}

func assertClean(t *testing.T, cgroup string, before int) {
	if left := netns.List(fmt.Sprintf("%s%d-", netns.Prefix, os.Getpid())); len(left) != 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind (%v)", cgroup, err)
	}
	if n := cgroupCount(t); n != before {
		t.Errorf("%d tailor-agent cgroups, %d before", n, before)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
