package agentbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// ConnResult is one load run against the loopback server.
type ConnResult struct {
	Mode       string  `json:"mode"` // baseline | agent | agent+costhist
	Conns      int64   `json:"conns"`
	PerSecond  float64 `json:"conns_per_s"`
	Events     uint64  `json:"events_submitted"`
	Received   uint64  `json:"events_received"`
	Lost       uint64  `json:"events_lost"`
	EstabP50Ns float64 `json:"established_p50_ns,omitempty"`
	EstabP99Ns float64 `json:"established_p99_ns,omitempty"`
	CloseP50Ns float64 `json:"close_p50_ns,omitempty"`
	AvgRunNs   float64 `json:"avg_run_ns_all_callbacks,omitempty"` // BPF_ENABLE_STATS
}

// ConnSpec is a load run's parameters.
type ConnSpec struct {
	Addr     string        // server address; default 127.0.0.1:18080
	Clients  int           // parallel clients; default 4
	Duration time.Duration // per run; default 4s
	Self     string        // this binary, re-executed as the server
}

// Serve is the benchmark server: accept, send 100 bytes, close.
func Serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	msg := make([]byte, 100)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() { _, _ = c.Write(msg); _ = c.Close() }()
	}
}

// Conn runs the baseline and the agent (telemetry to a JSON encoder into
// io.Discard, so encoding cost is included) at the same load.
func Conn(s ConnSpec) ([]ConnResult, error) {
	var out []ConnResult
	for _, mode := range []string{"baseline", "agent", "baseline", "agent", "agent+costhist"} {
		r, err := connRun(s, mode)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func connRun(s ConnSpec, mode string) (ConnResult, error) {
	res := ConnResult{Mode: mode}
	if mode == "baseline" {
		stop, err := startServer(exec.Command(s.Self, "bench", "serve", s.Addr))
		if err != nil {
			return res, err
		}
		defer stop()
		res.Conns = load(s)
		res.PerSecond = float64(res.Conns) / s.Duration.Seconds()
		return res, nil
	}
	return agentRun(s, mode == "agent+costhist")
}

func agentRun(s ConnSpec, hist bool) (ConnResult, error) {
	res := ConnResult{Mode: "agent"}
	if hist {
		res.Mode = "agent+costhist"
	}
	table, err := loopbackTable()
	if err != nil {
		return res, err
	}
	defer os.Remove(table)
	a, err := agent.Open(agent.Config{Table: table, Poll: time.Hour, CostHist: hist, Log: io.Discard})
	if err != nil {
		return res, err
	}
	defer a.Close()
	stopStats, _ := enableStats()
	defer stopStats()
	stopAgent, err := a.Start(context.Background(), telemetry.NewLineSink(io.Discard, "bench"))
	if err != nil {
		return res, err
	}
	cmd, release, err := a.Command(s.Self, "bench", "serve", s.Addr)
	if err != nil {
		stopAgent()
		return res, err
	}
	stop, err := startServer(cmd)
	release()
	if err != nil {
		stopAgent()
		return res, err
	}
	res.Conns = load(s)
	res.PerSecond = float64(res.Conns) / s.Duration.Seconds()
	time.Sleep(300 * time.Millisecond) // let the last connections close
	stop()
	stopAgent()
	return fillAgentStats(a, res, hist)
}

func fillAgentStats(a *agent.Agent, res ConnResult, hist bool) (ConnResult, error) {
	st, err := a.Stats()
	if err != nil {
		return res, err
	}
	res.Events, res.Received, res.Lost = st.Events, st.Received, st.EventsLost
	res.AvgRunNs = a.AvgRunNs()
	if hist {
		h, err := a.CostHistogram()
		if err != nil {
			return res, err
		}
		res.EstabP50Ns, res.EstabP99Ns = quantile(h[0][:], 0.5), quantile(h[0][:], 0.99)
		res.CloseP50Ns = quantile(h[1][:], 0.5)
	}
	return res, nil
}

// quantile of a 64 ns-bucket histogram (bucket midpoint).
func quantile(b []uint64, q float64) float64 {
	var total uint64
	for _, v := range b {
		total += v
	}
	var acc uint64
	for i, v := range b {
		acc += v
		if total > 0 && float64(acc) >= q*float64(total) {
			return float64(i)*64 + 32
		}
	}
	return 0
}

// load runs Clients connect-read-close loops for Duration.
func load(s ConnSpec) int64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(s.Duration)
	for i := 0; i < s.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				c, err := net.Dial("tcp", s.Addr)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, c)
				_ = c.Close()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load()
}

func startServer(cmd *exec.Cmd) (func(), error) {
	cmd.Stderr = os.Stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := cmd.Args[len(cmd.Args)-1]
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// loopbackTable: 127.0.0.0/8 -> cubic (Tailor's default CC; the host's is
// bbr, so the program switches CC) + IW 16 + sndbuf, telemetry on. It has a
// salt, as every table a policy compiles does, so the cost includes the
// per-client SipHash of spec/decision.md.
func loopbackTable() (string, error) {
	reg, err := knobs.Default()
	if err != nil {
		return "", err
	}
	light := map[string]any{"tcp.initial_cwnd": int64(16), "tcp.sndbuf_bytes": int64(262144)}
	def, id := reg.ConfigID(map[string]any{}), reg.ConfigID(light)
	t := map[string]any{"schema": "tailor.decision-table/v1", "version": 1, "generated_at": 0.0, "default": def,
		"configs": map[string]any{def: map[string]any{}, id: light},
		"groups":  []any{map[string]any{"id": "lo", "choices": []any{map[string]any{"config": id, "p": 1.0}}}},
		"rules":   []any{map[string]any{"prefix": "127.0.0.0/8", "group": "lo"}},
		"salt":    "000102030405060708090a0b0c0d0e0f"}
	b, _ := json.Marshal(t)
	f := filepath.Join(os.TempDir(), fmt.Sprintf("tailor-agent-bench-%d.json", os.Getpid()))
	return f, os.WriteFile(f, b, 0o644)
}
