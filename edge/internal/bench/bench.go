// Package bench measures tailor-link's accuracy with real traffic between
// two namespaces. Every scenario is one harness run bounded to 15 s.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/netns"
	"github.com/tailor-project/tailor/edge/internal/tun"
)

// runTimeout bounds each scenario.
const runTimeout = 15 * time.Second

// Row is one line of the accuracy table.
type Row struct {
	Metric   string  `json:"metric"`
	Target   float64 `json:"target"`
	Measured float64 `json:"measured"`
	Unit     string  `json:"unit"`
	ErrPct   float64 `json:"err_pct"` // (measured-target)/target in %
	Limit    string  `json:"limit"`
	Pass     bool    `json:"pass"`
	Note     string  `json:"note,omitempty"`
}

// Bench runs scenarios; Probe is the shell prefix that runs a probe tool.
type Bench struct {
	Probe string
	Log   io.Writer
	Rows  []Row
}

// scenario is one harness run with its probe commands.
type scenario struct {
	file   config.File
	server string // probe args for the server, may hold several joined by " & "
	client string // probe args run in sequence (joined by " && ")
	port   int
}

func (b *Bench) probe(args string) string { return b.Probe + " " + args }

// run executes s and decodes one JSON object per client output line.
func (b *Bench) run(s scenario, outs ...any) (tun.Stats, error) {
	c, err := config.Resolve(&s.file, false)
	if err != nil {
		return tun.Stats{}, err
	}
	var out bytes.Buffer
	res, err := netns.Run(context.Background(), netns.Spec{Link: c, ServerCmd: s.server,
		ClientCmd: s.client, Timeout: runTimeout, WaitPort: s.port, Stdout: &out, Stderr: b.Log})
	if err == nil && res.ClientExit != 0 {
		err = fmt.Errorf("client exit %d", res.ClientExit)
	}
	if err != nil {
		return res.Stats, fmt.Errorf("%w; output %q", err, out.String())
	}
	return res.Stats, decodeLines(out.Bytes(), outs)
}

func decodeLines(b []byte, outs []any) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for i := range outs {
		if !sc.Scan() {
			return fmt.Errorf("bench: want %d JSON lines, got %q", len(outs), b)
		}
		if err := json.Unmarshal(sc.Bytes(), outs[i]); err != nil {
			return fmt.Errorf("bench: line %d: %v", i, err)
		}
	}
	return nil
}

func (b *Bench) add(r Row) {
	if r.Target != 0 {
		r.ErrPct = 100 * (r.Measured - r.Target) / r.Target
	}
	b.Rows = append(b.Rows, r)
	fmt.Fprintf(b.Log, "bench: %-40s target %10.3f measured %10.3f %-8s err %+7.2f%% %s %s\n",
		r.Metric, r.Target, r.Measured, r.Unit, r.ErrPct, passWord(r.Pass), r.Note)
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// Markdown renders the table.
func (b *Bench) Markdown(w io.Writer) {
	fmt.Fprintln(w, "| metric | target | measured | unit | error | limit | result | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range b.Rows {
		fmt.Fprintf(w, "| %s | %.3f | %.3f | %s | %+.2f %% | %s | %s | %s |\n",
			r.Metric, r.Target, r.Measured, r.Unit, r.ErrPct, r.Limit, passWord(r.Pass), r.Note)
	}
}

func ptr[T any](v T) *T { return &v }

func hostInfo() string {
	k, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("kernel %s", bytes.TrimSpace(k))
}
