package bench

import (
	"fmt"
	"math"

	"github.com/tailor-project/tailor/edge/internal/config"
	"github.com/tailor-project/tailor/edge/internal/link"
	"github.com/tailor-project/tailor/edge/internal/probe"
)

const srvIP = config.DefaultSrvIP

// RTT measures UDP ping and TCP connect time at one target RTT (ms).
func (b *Bench) RTT(rttMS float64) error {
	n := int(min(20, 7000/rttMS))
	s := scenario{
		file:   config.File{DelayMS: ptr(rttMS / 2)},
		server: b.probe("udp-echo -dur 14s") + " & " + b.probe("tcp-serve -dur 14s") + " & wait",
		client: b.probe(fmt.Sprintf("udp-ping -n %d -interval 20ms -addr %s:9000", n, srvIP)) + " && " +
			b.probe(fmt.Sprintf("tcp-connect -n %d -interval 20ms -addr %s:9001", max(n/2, 3), srvIP)),
		port: 9001,
	}
	var ping struct {
		RTT probe.Summary `json:"rtt_ms"`
	}
	var conn struct {
		C probe.Summary `json:"connect_ms"`
	}
	if _, err := b.run(s, &ping, &conn); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		s    probe.Summary
	}{{"UDP ping RTT", ping.RTT}, {"TCP connect time", conn.C}} {
		b.add(Row{Metric: fmt.Sprintf("%s @ %g ms", m.name, rttMS), Target: rttMS, Measured: m.s.Avg,
			Unit: "ms", Limit: "±2 ms", Pass: math.Abs(m.s.Avg-rttMS) <= 2 && m.s.N > 0,
			Note: fmt.Sprintf("n=%d sd=%.2f max=%.2f", m.s.N, m.s.SD, m.s.Max)})
	}
	return nil
}

// Throughput runs a 10 s greedy download over a fixed-rate link (10 ms
// one-way delay) and compares the steady rate (seconds 2-10) with theory.
func (b *Bench) Throughput(mbit float64, cc string) error {
	queue := int(max(20, mbit*4)) // ≥ 1 BDP at 20 ms RTT
	s := scenario{
		file: config.File{DelayMS: ptr(10.0), QueuePackets: ptr(queue), RouteOpts: "congctl " + cc,
			Down: config.Dir{RateMbit: ptr(mbit)}, Up: config.Dir{RateMbit: ptr(mbit)}},
		server: b.probe("tcp-serve -dur 14s"),
		client: b.probe(fmt.Sprintf("tcp-get -dur 10s -bin 1s -addr %s:9001", srvIP)),
		port:   9001,
	}
	var get probe.GetResult
	st, err := b.run(s, &get)
	if err != nil {
		return err
	}
	good := mbitOver(get.Bins, 2, 10)
	ip := mbitOver(st.Down.BytesOutPerSec, 2, 10)
	name := fmt.Sprintf("%g Mbit %s", mbit, cc)
	b.add(Row{Metric: name + " link IP rate, s 2-10", Target: mbit, Measured: ip, Unit: "Mbit/s",
		Limit: "±5 %", Pass: math.Abs(ip-mbit)/mbit <= 0.05,
		Note: fmt.Sprintf("queue %d pkts, %d queue drops, lateness p99 %.0f µs max %.0f µs",
			queue, st.Down.QueueDrops, st.Down.Lateness.P99, st.Down.Lateness.Max)})
	ceil := mbit * 1448 / 1500
	b.add(Row{Metric: name + " TCP goodput, s 2-10", Target: ceil, Measured: good, Unit: "Mbit/s",
		Limit: "±5 %", Pass: math.Abs(good-ceil)/ceil <= 0.05, Note: "target = rate × 1448/1500"})
	if mbit == 50 {
		share := (st.CPU.ThreadUserS + st.CPU.ThreadSysS) / 10
		b.add(Row{Metric: "link thread CPU @ 50 Mbit " + cc, Target: 0.30, Measured: share, Unit: "core",
			Limit: "≤ 0.30", Pass: share <= 0.30, Note: fmt.Sprintf("link thread user %.2f s + sys %.2f s over the 10 s transfer",
				st.CPU.ThreadUserS, st.CPU.ThreadSysS)})
	}
	return nil
}

// mbitOver averages per-second byte counts over seconds [from, to).
func mbitOver(perSec []int64, from, to int) float64 {
	var sum int64
	for i := from; i < to && i < len(perSec); i++ {
		sum += perSec[i]
	}
	return float64(sum) * 8 / 1e6 / float64(to-from)
}

// Loss floods 100 000 UDP echoes (8 s) with loss p each way.
func (b *Bench) Loss(p float64) error {
	s := scenario{
		file:   config.File{Seed: ptr(uint64(7)), Down: config.Dir{Loss: ptr(p)}, Up: config.Dir{Loss: ptr(p)}},
		server: b.probe("udp-echo -dur 14s"),
		client: b.probe(fmt.Sprintf("udp-flood -n 100000 -pps 12500 -addr %s:9000", srvIP)),
	}
	var fl struct {
		Sent, Recv int
		Loss       float64
	}
	st, err := b.run(s, &fl)
	if err != nil {
		return err
	}
	want := 1 - (1-p)*(1-p)
	b.add(Row{Metric: fmt.Sprintf("round-trip loss @ %g each way", p), Target: want, Measured: fl.Loss,
		Unit: "fraction", Limit: "±10 % rel", Pass: math.Abs(fl.Loss-want)/want <= 0.10,
		Note: fmt.Sprintf("sent %d recv %d", fl.Sent, fl.Recv)})
	for _, d := range []struct {
		name string
		s    link.Stats
	}{{"up", st.Up}, {"down", st.Down}} {
		got := float64(d.s.RandomDrops) / float64(max(d.s.PacketsIn, 1))
		b.add(Row{Metric: fmt.Sprintf("%s loss (link counters) @ %g", d.name, p), Target: p, Measured: got,
			Unit: "fraction", Limit: "±10 % rel", Pass: math.Abs(got-p)/p <= 0.10,
			Note: fmt.Sprintf("%d of %d", d.s.RandomDrops, d.s.PacketsIn)})
	}
	return nil
}
