package bench

import "fmt"

// All runs the full accuracy suite; traceDir holds the mahimahi traces.
func (b *Bench) All(traceDir string) error {
	fmt.Fprintln(b.Log, "bench:", hostInfo())
	steps := []func() error{}
	for _, rtt := range []float64{10, 50, 100, 200, 500} {
		steps = append(steps, func() error { return b.RTT(rtt) })
	}
	for _, r := range []float64{1, 10, 50} {
		steps = append(steps, func() error { return b.Throughput(r, "cubic") })
	}
	steps = append(steps, func() error { return b.Throughput(50, "bbr") })
	for _, p := range []float64{0.01, 0.05} {
		steps = append(steps, func() error { return b.Loss(p) })
	}
	steps = append(steps, func() error { return b.Trace(traceDir, "TMobile-LTE-short") })
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
