package netns_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/cli"
	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/probe"
)

// The test binary doubles as the probe tools and as tailor-link itself.
func TestMain(m *testing.M) {
	switch os.Getenv("TL_TEST_MODE") {
	case "probe":
		os.Exit(probe.Main(os.Args[1:], os.Stdout, os.Stderr))
	case "cli":
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func privileged(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("integration test: needs root (namespaces, TUN)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("integration test: /dev/net/tun missing")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("integration test: iproute2 `ip` missing")
	}
}

// probeCmd is a shell command running probe tool args.
func probeCmd(args string) string {
	return fmt.Sprintf("TL_TEST_MODE=probe %s %s", os.Args[0], args)
}

func mustConfig(t *testing.T, f config.File) *config.Config {
	t.Helper()
	c, err := config.Resolve(&f, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// assertClean checks that nothing created by this process is left.
func assertClean(t *testing.T) {
	t.Helper()
	prefix := fmt.Sprintf("%s%d-", netns.Prefix, os.Getpid())
	if left := netns.List(prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	out, _ := exec.Command("ip", "-o", "link").Output()
	for _, dev := range []string{config.DefaultSrvDev + ":", config.DefaultCliDev + ":"} {
		if strings.Contains(string(out), " "+dev) {
			t.Errorf("device %s left in the root namespace", dev)
		}
	}
}

func jsonLines(t *testing.T, b []byte, into ...any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	for i := 0; i < len(into); i++ {
		if !sc.Scan() {
			t.Fatalf("want %d JSON lines, got %q", len(into), b)
		}
		if err := json.Unmarshal(sc.Bytes(), into[i]); err != nil {
			t.Fatalf("line %d: %v: %q", i, err, sc.Bytes())
		}
	}
}

func TestDelayAndRateOverRealTraffic(t *testing.T) {
	privileged(t)
	defer assertClean(t)
	cfg := mustConfig(t, config.File{DelayMS: ptr(50.0), QueuePackets: ptr(200),
		Down: config.Dir{RateMbit: ptr(10.0)}, Up: config.Dir{RateMbit: ptr(10.0)}})
	var out bytes.Buffer
	srv := netns.ServerIP
	res, err := netns.Run(context.Background(), netns.Spec{
		Link:      cfg,
		ServerCmd: probeCmd("udp-echo -dur 30s") + " & " + probeCmd("tcp-serve -dur 30s") + " & wait",
		ClientCmd: probeCmd("udp-ping -n 20 -interval 20ms -addr "+srv+":9000") + " && " +
			probeCmd("tcp-get -bytes 2000000 -mark 1000000 -addr "+srv+":9001"),
		Timeout: 40 * time.Second, WaitPort: 9001, Stdout: &out,
	})
	if err != nil || res.ClientExit != 0 {
		t.Fatalf("run: exit %d, err %v, out %s", res.ClientExit, err, out.String())
	}
	var ping struct {
		RTT probe.Summary `json:"rtt_ms"`
	}
	var get probe.GetResult
	jsonLines(t, out.Bytes(), &ping, &get)
	checkRTT(t, ping.RTT)
	checkTransfer(t, get)
	t.Logf("link: down lateness %+v, cpu %.1f%%", res.Stats.Down.Lateness, 100*res.Stats.CPU.ThreadCoreShare)
}

func checkRTT(t *testing.T, s probe.Summary) {
	t.Logf("UDP RTT over 50 ms one-way: %+v", s)
	// The median is robust to the probe processes being descheduled. The
	// emulated delay is never shortened (min >= 100); on top of it the path
	// costs about 0.5-2 ms (two TUN traversals each way, the emulator's
	// wake-up lateness, the probes' own scheduling). Medians 100.5-100.6 ms
	// when tailor-link was measured; 101.0-102.1 ms in four runs on an idle
	// machine of the same kind on 2026-11-23 (one failed the former +2 ms
	// bound by 0.01 ms), with the emulator's lateness p99 at 5-8 ms.
	if s.N < 20 || s.P50 > 103 || s.Min < 100 {
		t.Errorf("RTT median %.2f ms (min %.2f, n %d), want 100 to 103", s.P50, s.Min, s.N)
	}
}

// checkTransfer times the second megabyte of a 2 MB download: the first
// megabyte opens the congestion window, so the second is paced by the
// link. Theory: 1e6 B in 1448-byte segments of 1500 IP bytes at 10 Mbit.
func checkTransfer(t *testing.T, g probe.GetResult) {
	theory := math.Ceil(1e6/1448) * 1500 * 8 / 10e6
	t.Logf("2 MB get: %.3f s total, 2nd MB %.3f s (theory %.3f s)", g.ElapsedS, g.MarkToEndS, theory)
	if g.Bytes != 2000000 || math.Abs(g.MarkToEndS-theory)/theory > 0.10 {
		t.Errorf("1 MB at 10 Mbit took %.3f s, want %.3f s ± 10%% (bytes %d)", g.MarkToEndS, theory, g.Bytes)
	}
}

func TestRunTimeoutCleansUp(t *testing.T) {
	privileged(t)
	defer assertClean(t)
	start := time.Now()
	_, err := netns.Run(context.Background(), netns.Spec{
		Link:      mustConfig(t, config.File{DelayMS: ptr(5.0)}),
		ServerCmd: "sleep 30", ClientCmd: "sleep 30", Timeout: time.Second,
	})
	if !errors.Is(err, netns.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout run took %v", d)
	}
}

func TestSetupFailureCleansUp(t *testing.T) {
	privileged(t)
	defer assertClean(t)
	_, err := netns.Run(context.Background(), netns.Spec{
		Link:      mustConfig(t, config.File{RouteOpts: "no-such-route-option 1"}),
		ClientCmd: "true", Timeout: 10 * time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "route replace") {
		t.Fatalf("err = %v, want a route error", err)
	}
}

func TestCLISignalCleansUp(t *testing.T) {
	privileged(t)
	defer assertClean(t)
	cmd := exec.Command(os.Args[0], "run", "--delay", "1", "--client-cmd", "sleep 30", "--timeout", "20s")
	cmd.Env = append(os.Environ(), "TL_TEST_MODE=cli")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130; stderr %s", code, err, stderr.String())
	}
	prefix := fmt.Sprintf("%s%d-", netns.Prefix, cmd.Process.Pid)
	if left := netns.List(prefix); len(left) > 0 {
		t.Errorf("child left namespaces: %v", left)
	}
}

func TestCLIStandaloneLink(t *testing.T) {
	privileged(t)
	defer assertClean(t)
	srv, cli := netns.Names()
	for _, n := range []string{srv, cli} {
		if err := netns.Add(n); err != nil {
			t.Fatal(err)
		}
		defer netns.Del(n)
	}
	stats := t.TempDir() + "/stats.json"
	cmd := exec.Command(os.Args[0], "--srv-ns", srv, "--cli-ns", cli, "--delay", "5",
		"--down-rate-mbit", "20", "--duration", "1s", "--stats", stats)
	cmd.Env = append(os.Environ(), "TL_TEST_MODE=cli")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tailor-link: %v: %s", err, out)
	}
	var st struct {
		Down struct {
			PacketsIn int64 `json:"packets_in"`
		} `json:"down"`
		CPU struct {
			WallS float64 `json:"wall_s"`
		} `json:"cpu"`
	}
	b, err := os.ReadFile(stats)
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || st.CPU.WallS < 0.9 || st.CPU.WallS > 3 {
		t.Fatalf("stats %s: %v", b, err)
	}
}
