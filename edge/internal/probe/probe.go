// Package probe holds small traffic tools (UDP echo/ping/flood, TCP bulk
// and connect timing) run inside namespaces by tests and the benchmark.
// Each prints one JSON object on stdout and is bounded in time.
package probe

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// Main runs probe args[0] with the remaining args.
func Main(args []string, stdout, stderr io.Writer) int {
	tools := map[string]func(*flag.FlagSet, []string) (any, error){
		"udp-echo": udpEcho, "udp-ping": udpPing, "udp-flood": udpFlood,
		"tcp-serve": tcpServe, "tcp-get": tcpGet, "tcp-connect": tcpConnect,
	}
	if len(args) == 0 || tools[args[0]] == nil {
		fmt.Fprintln(stderr, "probe: want one of udp-echo udp-ping udp-flood tcp-serve tcp-get tcp-connect")
		return 2
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	out, err := tools[args[0]](fs, args[1:])
	if err != nil {
		fmt.Fprintln(stderr, "probe:", err)
		return 1
	}
	if out != nil {
		_ = json.NewEncoder(stdout).Encode(out)
	}
	return 0
}

// Summary describes a sample of durations in ms.
type Summary struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	Avg float64 `json:"avg"`
	P50 float64 `json:"p50"`
	Max float64 `json:"max"`
	SD  float64 `json:"sd"`
}

func summarize(ms []float64) Summary {
	if len(ms) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	var sum, sq float64
	for _, v := range s {
		sum += v
	}
	avg := sum / float64(len(s))
	for _, v := range s {
		sq += (v - avg) * (v - avg)
	}
	return Summary{N: len(s), Min: s[0], Avg: avg, P50: s[len(s)/2], Max: s[len(s)-1],
		SD: math.Sqrt(sq / float64(len(s)))}
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e6 }
