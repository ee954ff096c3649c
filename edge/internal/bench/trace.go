package bench

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/link"
	"github.com/tailor-project/tailor/edge/internal/probe"
)

// Trace replays a mahimahi trace pair (dir/name.down, dir/name.up) with a
// greedy 12 s download and compares delivered bytes per second with the
// trace's capacity in seconds 3-12.
func (b *Bench) Trace(dir, name string) error {
	down, up := filepath.Join(dir, name+".down"), filepath.Join(dir, name+".up")
	tr, err := link.LoadTrace(down)
	if err != nil {
		return err
	}
	s := scenario{
		file: config.File{DelayMS: ptr(20.0), QueueBytes: ptr(300_000), RouteOpts: "congctl cubic",
			Down: config.Dir{Trace: &down}, Up: config.Dir{Trace: &up}},
		server: b.probe("tcp-serve -dur 14s"),
		client: b.probe(fmt.Sprintf("tcp-get -dur 12s -bin 1s -addr %s:9001", srvIP)),
		port:   9001,
	}
	var get probe.GetResult
	st, err := b.run(s, &get)
	if err != nil {
		return err
	}
	b.traceRows(name, tr.CapacityPerSecond(13), st.Down.BytesOutPerSec)
	return nil
}

func (b *Bench) traceRows(name string, capy, got []int64) {
	var sumC, sumG int64
	worst, series := 0.0, ""
	for s := 3; s < 12 && s < len(got); s++ {
		sumC += capy[s]
		sumG += got[s]
		series += fmt.Sprintf("%.1f/%.1f ", mbit(got[s]), mbit(capy[s]))
		if capy[s] > 0 {
			worst = max(worst, math.Abs(float64(got[s]-capy[s]))/float64(capy[s]))
		}
	}
	util := float64(sumG) / float64(max(sumC, 1))
	b.add(Row{Metric: name + " trace utilisation, s 3-12", Target: 1, Measured: util, Unit: "fraction",
		Limit: "≥ 0.95", Pass: util >= 0.95 && util <= 1.0001,
		Note: fmt.Sprintf("per-second delivered/capacity Mbit: %s; worst second off by %.1f %%", series, 100*worst)})
}

func mbit(b int64) float64 { return float64(b) * 8 / 1e6 }
