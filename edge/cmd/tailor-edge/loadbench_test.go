package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// TestBenchLoad is the load comparison of bench/edge/run.sh: the built
// tailor-edge with per-connection selection against the same binary with
// --static (one configuration, no GetConfigForClient), at the same load on
// loopback. Both servers run at once and rounds alternate A B B A, so
// background load on this shared machine hits both alike. Only with
// TAILOR_EDGE_BENCH=1 (it is a benchmark, not a test).
func TestBenchLoad(t *testing.T) {
	if os.Getenv("TAILOR_EDGE_BENCH") != "1" {
		t.Skip("benchmark: run bench/edge/run.sh (TAILOR_EDGE_BENCH=1)")
	}
	rounds := envInt("TAILOR_EDGE_BENCH_ROUNDS", 8)
	conns := envInt("TAILOR_EDGE_BENCH_CONNS", 1000)
	workers := envInt("TAILOR_EDGE_BENCH_WORKERS", 4)
	table := writeTable(t, true) // 127/8 -> h2 config via a rule; default h1.1
	modes := []struct {
		name string
		p    *edgeProc
	}{
		{"selection", startEdge(t, "--self-signed", "--quic", "--table", table)},
		{"static", startEdge(t, "--self-signed", "--quic", "--static", "--table", writeStaticTable(t))},
	}
	res := map[string]any{"rounds": rounds, "conns_per_round": conns, "workers": workers, "go": "tailor-edge binary, loopback"}
	for _, proto := range []string{"h2", "h3"} {
		lat := map[string][]time.Duration{}
		busy := map[string]time.Duration{}
		cpu := map[string]time.Duration{}
		// paired per-round ratios selection/static: robust to load drifting
		// between rounds on a shared machine
		var p50r, p99r, cpur []float64
		for r := range rounds {
			order := []int{0, 1}
			if r%2 == 1 {
				order = []int{1, 0}
			}
			round := map[string][]time.Duration{}
			roundCPU := map[string]time.Duration{}
			for _, i := range order {
				m := modes[i]
				n := conns
				if proto == "h3" {
					n = conns / 2
				}
				c0 := serverCPU(t, m.p)
				d, samples := connLoad(t, proto, m.p.Addr, n, workers)
				roundCPU[m.name] = serverCPU(t, m.p) - c0
				cpu[m.name] += roundCPU[m.name]
				slices.Sort(samples)
				round[m.name] = samples
				lat[m.name] = append(lat[m.name], samples...)
				busy[m.name] += d
			}
			a, b := round["selection"], round["static"]
			p50r = append(p50r, float64(q(a, 0.5))/float64(q(b, 0.5)))
			p99r = append(p99r, float64(q(a, 0.99))/float64(q(b, 0.99)))
			cpur = append(cpur, float64(roundCPU["selection"])/float64(roundCPU["static"]))
		}
		out := map[string]any{}
		for _, m := range modes {
			s := lat[m.name]
			slices.Sort(s)
			out[m.name] = map[string]float64{"p50_ms": ms(q(s, 0.5)), "p99_ms": ms(q(s, 0.99)), "conns_per_s": float64(len(s)) / busy[m.name].Seconds(),
				"server_cpu_us_per_conn": float64(cpu[m.name].Microseconds()) / float64(len(s)), "n": float64(len(s))}
		}
		a, b := out["selection"].(map[string]float64), out["static"].(map[string]float64)
		diff := map[string]float64{"p50_pooled": pct(a["p50_ms"], b["p50_ms"]), "p99_pooled": pct(a["p99_ms"], b["p99_ms"]),
			"conns_per_s": pct(a["conns_per_s"], b["conns_per_s"]), "server_cpu_per_conn": pct(a["server_cpu_us_per_conn"], b["server_cpu_us_per_conn"]),
			"p50_median_paired": 100 * (median(p50r) - 1), "p99_median_paired": 100 * (median(p99r) - 1), "server_cpu_median_paired": 100 * (median(cpur) - 1)}
		out["diff_pct"] = diff
		res["handshake_first_response_"+proto] = out
		t.Logf("%s new connection + first response: selection p50 %.3f p99 %.3f ms %.0f conn/s %.0f µs server CPU/conn | static p50 %.3f p99 %.3f ms %.0f conn/s %.0f µs/conn",
			proto, a["p50_ms"], a["p99_ms"], a["conns_per_s"], a["server_cpu_us_per_conn"], b["p50_ms"], b["p99_ms"], b["conns_per_s"], b["server_cpu_us_per_conn"])
		t.Logf("%s selection vs static: p50 %+.1f%% (median of paired rounds %+.1f%%), p99 %+.1f%% (paired %+.1f%%), conn/s %+.1f%%, server CPU/conn %+.1f%% (paired %+.1f%%)",
			proto, diff["p50_pooled"], diff["p50_median_paired"], diff["p99_pooled"], diff["p99_median_paired"], diff["conns_per_s"], diff["server_cpu_per_conn"], diff["server_cpu_median_paired"])
	}
	if h2load, err := exec.LookPath("h2load"); err == nil {
		for _, c := range []struct {
			name string
			args []string
		}{{"h2load_h2_keepalive", nil}, {"h2load_h1_keepalive", []string{"--h1"}}} {
			rps := map[string][]float64{}
			for r := range 3 {
				for _, i := range [][]int{{0, 1}, {1, 0}}[r%2] {
					rps[modes[i].name] = append(rps[modes[i].name], h2loadRPS(t, h2load, modes[i].p.Port, c.args))
				}
			}
			out := map[string]any{}
			for k, v := range rps {
				sort.Float64s(v)
				out[k] = map[string]float64{"median_req_per_s": v[len(v)/2]}
			}
			a, b := rps["selection"][1], rps["static"][1]
			out["diff_pct"] = pct(a, b)
			res[c.name] = out
			t.Logf("%s (20000 requests, 8 connections x 10 streams): selection %.0f req/s, static %.0f req/s, diff %+.1f%%", c.name, a, b, pct(a, b))
		}
	}
	if path := os.Getenv("TAILOR_EDGE_BENCH_OUT"); path != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		must(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
}

// writeStaticTable is writeTable(true)'s h2 config as the table default,
// so --static serves every connection the same configuration selection
// picks for 127/8.
func writeStaticTable(t *testing.T) string {
	path := writeTable(t, true)
	raw, err := os.ReadFile(path)
	must(t, err)
	var doc map[string]any
	must(t, json.Unmarshal(raw, &doc))
	groups := doc["groups"].([]any)
	doc["default"] = groups[0].(map[string]any)["choices"].([]any)[0].(map[string]any)["config"]
	b, err := json.Marshal(doc)
	must(t, err)
	must(t, os.WriteFile(path, b, 0o644))
	return path
}

// connLoad opens n fresh connections with w workers (closed loop); each is
// timed from dial to the end of the first response body (index.html).
func connLoad(t *testing.T, proto, addr string, n, w int) (time.Duration, []time.Duration) {
	var mu sync.Mutex
	var samples []time.Duration
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for range next {
				d, err := oneConn(proto, addr)
				if err != nil {
					t.Errorf("%s %s: %v", proto, addr, err)
					return
				}
				mu.Lock()
				samples = append(samples, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return time.Since(start), samples
}

func oneConn(proto, addr string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"} // no session cache: full handshakes
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://localhost/", nil)
	var resp *http.Response
	switch proto {
	case "h2":
		tc.NextProtos = []string{"h2"}
		c, err := (&tls.Dialer{Config: tc}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		cc, err := (&http2.Transport{}).NewClientConn(c)
		if err != nil {
			return 0, err
		}
		if resp, err = cc.RoundTrip(req); err != nil {
			return 0, err
		}
	case "h3":
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return 0, err
		}
		tc.NextProtos = []string{http3.NextProtoH3}
		qc, err := quic.DialAddr(ctx, ua.String(), tc, nil)
		if err != nil {
			return 0, err
		}
		defer qc.CloseWithError(0, "")
		cc := (&http3.Transport{}).NewClientConn(qc)
		if resp, err = cc.RoundTrip(req); err != nil {
			return 0, err
		}
	}
	_, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(t0), err
}

var h2loadRPSRE = regexp.MustCompile(`finished in .*?, ([0-9.]+) req/s`)

func h2loadRPS(t *testing.T, h2load, port string, extra []string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-n", "20000", "-c", "8", "-m", "10", "-T", "10"}, extra...)
	out, err := exec.CommandContext(ctx, h2load, append(args, "https://127.0.0.1:"+port+"/")...).CombinedOutput()
	m := h2loadRPSRE.FindStringSubmatch(string(out))
	if err != nil || m == nil || !h2loadReq.MatchString(string(out)) {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
	if r := h2loadReq.FindStringSubmatch(string(out)); r[4] != "20000" {
		t.Errorf("h2load: %s of 20000 succeeded", r[4])
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// serverCPU is the CPU time the server process has used (all threads,
// /proc/PID/task/*/schedstat, ns resolution).
func serverCPU(t *testing.T, p *edgeProc) time.Duration {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.cmd.Process.Pid))
	must(t, err)
	var sum int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // thread exited
		}
		var onCPU int64
		if _, err := fmt.Sscan(string(b), &onCPU); err == nil {
			sum += onCPU
		}
	}
	return time.Duration(sum)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[len(s)/2]
}

func q(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(p*float64(len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(a, b float64) float64 { return 100 * (a - b) / b }

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}
