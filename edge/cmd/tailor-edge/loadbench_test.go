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
	"strings"
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
// loopback. Both servers run at once and every worker alternates between
// them connection by connection, so background load on this shared machine
// hits both alike (an A/A run of this schedule differs by <= 0.5% at p50;
// the older A B B A schedule of whole rounds by 3-6%). Only with
// TAILOR_EDGE_BENCH=1 (it is a benchmark, not a test).
func TestBenchLoad(t *testing.T) {
	if os.Getenv("TAILOR_EDGE_BENCH") != "1" {
		t.Skip("benchmark: run bench/edge/run.sh (TAILOR_EDGE_BENCH=1)")
	}
	rounds := envInt("TAILOR_EDGE_BENCH_ROUNDS", 8)
	conns := envInt("TAILOR_EDGE_BENCH_CONNS", 1000)
	workers := envInt("TAILOR_EDGE_BENCH_WORKERS", 4)
	table := writeTable(t, true) // 127/8 -> h2 config via a rule; default h1.1
	// TAILOR_EDGE_BENCH_PROFILE=DIR: each server writes DIR/<mode>.pprof
	// (--cpuprofile) when it stops. TAILOR_EDGE_BENCH_PROTOS="h2": only
	// these new-connection loads, and no h2load (a profile of one path).
	prof := func(mode string) []string {
		if dir := os.Getenv("TAILOR_EDGE_BENCH_PROFILE"); dir != "" {
			return []string{"--cpuprofile", filepath.Join(dir, mode+".pprof")}
		}
		return nil
	}
	protos, h2loadToo := []string{"h2", "h3"}, true
	if v := os.Getenv("TAILOR_EDGE_BENCH_PROTOS"); v != "" {
		protos, h2loadToo = strings.Fields(strings.ReplaceAll(v, ",", " ")), false
	}
	args := map[string][]string{
		"selection": {"--self-signed", "--quic", "--table", table},
		"static":    {"--self-signed", "--quic", "--static", "--table", writeStaticTable(t)},
	}
	// TAILOR_EDGE_BENCH_ARGS: extra flags for both servers (e.g.
	// --apply-socket=false to take the setsockopt calls out of both).
	for k := range args {
		args[k] = append(args[k], strings.Fields(os.Getenv("TAILOR_EDGE_BENCH_ARGS"))...)
	}
	// TAILOR_EDGE_BENCH_AA=selection|static: both servers run that mode (an
	// A/A run: the harness's own bias and noise between two processes).
	if aa := os.Getenv("TAILOR_EDGE_BENCH_AA"); aa != "" {
		if args[aa] == nil {
			t.Fatalf("TAILOR_EDGE_BENCH_AA=%q: want selection or static", aa)
		}
		args["selection"], args["static"] = args[aa], args[aa]
		t.Logf("A/A run: both servers run %s (the labels only name the slots)", aa)
	}
	// TAILOR_EDGE_BENCH_SCHEDULE: "interleaved" (default: every worker
	// alternates the two servers connection by connection, so both see the
	// same background load) or "abba" (one server at a time, rounds in
	// A B B A order: the schedule before 2026-11-21).
	interleave := true
	switch v := os.Getenv("TAILOR_EDGE_BENCH_SCHEDULE"); v {
	case "", "interleaved":
	case "abba":
		interleave = false
	default:
		t.Fatalf("TAILOR_EDGE_BENCH_SCHEDULE=%q: want interleaved or abba", v)
	}
	modes := []struct {
		name string
		p    *edgeProc
	}{
		{"selection", startEdge(t, append(args["selection"], prof("selection")...)...)},
		{"static", startEdge(t, append(args["static"], prof("static")...)...)},
	}
	res := map[string]any{"rounds": rounds, "conns_per_round": conns, "workers": workers, "go": "tailor-edge binary, loopback",
		"schedule": map[bool]string{true: "interleaved", false: "abba"}[interleave], "aa": os.Getenv("TAILOR_EDGE_BENCH_AA"),
		"extra_args": os.Getenv("TAILOR_EDGE_BENCH_ARGS")}
	for _, proto := range protos {
		lat := map[string][]time.Duration{}
		busy := map[string]time.Duration{}
		cpu := map[string]time.Duration{}
		// paired per-round ratios selection/static: robust to load drifting
		// between rounds on a shared machine
		var p50r, p99r, cpur []float64
		for r := range rounds {
			round := map[string][]time.Duration{}
			roundCPU := map[string]time.Duration{}
			n := conns
			if proto == "h3" {
				n = conns / 2
			}
			if interleave {
				// both servers in the same interval, connection by connection:
				// background load hits both alike
				c0 := [2]time.Duration{serverCPU(t, modes[0].p), serverCPU(t, modes[1].p)}
				samples := connLoadPair(t, proto, [2]string{modes[0].p.Addr, modes[1].p.Addr}, n, workers, r%2)
				for i, m := range modes {
					roundCPU[m.name] = serverCPU(t, m.p) - c0[i]
					cpu[m.name] += roundCPU[m.name]
					slices.Sort(samples[i])
					round[m.name] = samples[i]
					lat[m.name] = append(lat[m.name], samples[i]...)
					for _, d := range samples[i] { // closed loop: w workers' share of the time
						busy[m.name] += d / time.Duration(workers)
					}
				}
			} else {
				for _, i := range [][]int{{0, 1}, {1, 0}}[r%2] {
					m := modes[i]
					c0 := serverCPU(t, m.p)
					d, samples := connLoad(t, proto, m.p.Addr, n, workers)
					roundCPU[m.name] = serverCPU(t, m.p) - c0
					cpu[m.name] += roundCPU[m.name]
					slices.Sort(samples)
					round[m.name] = samples
					lat[m.name] = append(lat[m.name], samples...)
					busy[m.name] += d
				}
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
	if h2load, err := exec.LookPath("h2load"); err == nil && h2loadToo {
		for _, c := range []struct {
			name string
			args []string
		}{{"h2load_h2_keepalive", nil}, {"h2load_h1_keepalive", []string{"--h1"}}} {
			rps := map[string][]float64{}
			for r := range 3 {
				if interleave { // both at once: each server gets one h2load under the same background load
					var v [2]float64
					var errs [2]error
					var wg sync.WaitGroup
					for i := range modes {
						wg.Go(func() { v[i], errs[i] = h2loadRPS(h2load, modes[i].p.Port, c.args) })
					}
					wg.Wait()
					for i, m := range modes {
						must(t, errs[i])
						rps[m.name] = append(rps[m.name], v[i])
					}
					continue
				}
				for _, i := range [][]int{{0, 1}, {1, 0}}[r%2] {
					v, err := h2loadRPS(h2load, modes[i].p.Port, c.args)
					must(t, err)
					rps[modes[i].name] = append(rps[modes[i].name], v)
				}
			}
			out := map[string]any{}
			var ratios []float64
			for i := range rps["selection"] {
				ratios = append(ratios, rps["selection"][i]/rps["static"][i])
			}
			for k, v := range rps {
				out[k] = map[string]float64{"median_req_per_s": median(v)}
			}
			a, b := median(rps["selection"]), median(rps["static"])
			out["diff_pct"], out["diff_median_paired_pct"] = pct(a, b), 100*(median(ratios)-1)
			res[c.name] = out
			how := map[bool]string{true: "both at once", false: "one at a time"}[interleave]
			t.Logf("%s (20000 requests, 8 connections x 10 streams, 3 runs, %s): selection %.0f req/s, static %.0f req/s (medians), diff %+.1f%% (median of paired runs %+.1f%%)",
				c.name, how, a, b, pct(a, b), 100*(median(ratios)-1))
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

// connLoadPair opens n fresh connections to each of two servers with w
// workers (closed loop); each worker alternates between the servers, worker
// i starting with server (i+first)%2, so both servers are measured in the
// same interval under the same load.
func connLoadPair(t *testing.T, proto string, addrs [2]string, n, w, first int) [2][]time.Duration {
	var mu sync.Mutex
	var samples [2][]time.Duration
	var left [2]int
	left[0], left[1] = n, n
	var wg sync.WaitGroup
	for i := range w {
		wg.Go(func() {
			k := (i + first) % 2
			for {
				mu.Lock()
				if left[k] == 0 {
					k = 1 - k
				}
				if left[k] == 0 {
					mu.Unlock()
					return
				}
				left[k]--
				mu.Unlock()
				d, err := oneConn(proto, addrs[k])
				if err != nil {
					t.Errorf("%s %s: %v", proto, addrs[k], err)
					return
				}
				mu.Lock()
				samples[k] = append(samples[k], d)
				mu.Unlock()
				k = 1 - k
			}
		})
	}
	wg.Wait()
	return samples
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

func h2loadRPS(h2load, port string, extra []string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-n", "20000", "-c", "8", "-m", "10", "-T", "10"}, extra...)
	out, err := exec.CommandContext(ctx, h2load, append(args, "https://127.0.0.1:"+port+"/")...).CombinedOutput()
	m := h2loadRPSRE.FindStringSubmatch(string(out))
	if err != nil || m == nil || !h2loadReq.MatchString(string(out)) {
		return 0, fmt.Errorf("h2load: %v\n%s", err, out)
	}
	if r := h2loadReq.FindStringSubmatch(string(out)); r[4] != "20000" {
		return 0, fmt.Errorf("h2load: %s of 20000 succeeded", r[4])
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v, nil
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
