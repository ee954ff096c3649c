package link

import (
	"math"
	"testing"
)

const sec = int64(1e9)

// saturate offers n packets of size bytes at time t.
func saturate(d *Dir, t int64, n int, size int32) {
	for i := 0; i < n; i++ {
		d.Arrive(t, Packet{ID: int32(i), Size: size})
	}
}

// drain advances to t and returns delivered packets, checking order.
func drain(t *testing.T, d *Dir, now int64) []Packet {
	d.Advance(now)
	var out []Packet
	for p, ok := d.PopDelivered(); ok; p, ok = d.PopDelivered() {
		if p.T > now {
			t.Fatalf("packet delivered in the future: %d > %d", p.T, now)
		}
		if n := len(out); n > 0 && p.T < out[n-1].T {
			t.Fatalf("delivery times not monotonic")
		}
		out = append(out, p)
	}
	return out
}

func bytesUntil(ps []Packet, t int64) (b int64) {
	for _, p := range ps {
		if p.T <= t {
			b += int64(p.Size)
		}
	}
	return b
}

func TestRateDeliversConfiguredRate(t *testing.T) {
	for _, mbit := range []float64{0.5, 1, 10, 50, 100, 1000} {
		for _, size := range []int32{64, 576, 1500} {
			bps := int64(mbit * 1e6)
			d := NewDir(Params{RateBps: bps}, 0, 1, 1)
			saturate(d, 0, int(bps/8/int64(size))+100, size)
			got := bytesUntil(drain(t, d, sec), sec)
			want := float64(bps) / 8
			// Whole packets only: allow one packet at very low rates.
			tol := max(0.001*want, float64(size))
			if math.Abs(float64(got)-want) > tol {
				t.Errorf("%v Mbit size %d: %d bytes in 1 s, want %.0f ± %.0f", mbit, size, got, want, tol)
			}
		}
	}
}

func TestDelayOnlyExact(t *testing.T) {
	d := NewDir(Params{DelayNs: 50e6}, 0, 1, 1)
	d.Arrive(1000, Packet{Size: 100})
	if n := d.Next(); n != 1000+50e6 {
		t.Fatalf("Next = %d", n)
	}
	if got := drain(t, d, 50e6); len(got) != 0 {
		t.Fatal("delivered too early")
	}
	got := drain(t, d, 60e6)
	if len(got) != 1 || got[0].T != 1000+50e6 {
		t.Fatalf("got %+v", got)
	}
}

func TestRateAndDelayCompose(t *testing.T) {
	// 1500 B at 12 Mbit = 1 ms serialisation after 10 ms delay.
	d := NewDir(Params{RateBps: 12e6, DelayNs: 10e6}, 0, 1, 1)
	d.Arrive(0, Packet{Size: 1500})
	d.Arrive(0, Packet{Size: 1500})
	got := drain(t, d, sec)
	if len(got) != 2 || got[0].T != 11e6 || got[1].T != 12e6 {
		t.Fatalf("got %+v", got)
	}
}

func TestTraceSaturatedMatchesCapacity(t *testing.T) {
	// 3 opportunities at 0 ms, then one every 2 ms, period 1000 ms.
	ms := []int64{0, 0, 0}
	for m := int64(2); m <= 1000; m += 2 {
		ms = append(ms, m)
	}
	tr := &Trace{MS: ms}
	d := NewDir(Params{Trace: tr}, 0, 1, 1)
	// The packet must be queued before the first opportunity at t=0 ...
	// mahimahi burns opportunities <= arrival, so arrive at -1 ns.
	saturate(d, -1, 5000, 1500)
	out := drain(t, d, 3*sec-1)
	capy := tr.CapacityPerSecond(3)
	for s := int64(0); s < 3; s++ {
		got := bytesUntil(out, (s+1)*sec-1) - bytesUntil(out, s*sec-1)
		if got != capy[s] {
			t.Errorf("second %d: delivered %d, capacity %d", s, got, capy[s])
		}
	}
}

func TestTraceByteSplitting(t *testing.T) {
	tr := &Trace{MS: []int64{1, 2, 3, 4}}
	d := NewDir(Params{Trace: tr}, 0, 1, 1)
	d.Arrive(0, Packet{ID: 1, Size: 1000})
	d.Arrive(0, Packet{ID: 2, Size: 1000}) // 500 B at 1 ms, 500 B at 2 ms
	d.Arrive(0, Packet{ID: 3, Size: 2500}) // 1000 B at 2 ms, 1500 at 3 ms
	got := drain(t, d, 10e6)
	want := []int64{1e6, 2e6, 3e6}
	for i, p := range got {
		if p.T != want[i] {
			t.Fatalf("packet %d delivered at %d, want %d", p.ID, p.T, want[i])
		}
	}
}

func TestTraceWastesIdleOpportunitiesAndLoops(t *testing.T) {
	tr := &Trace{MS: []int64{10, 20}} // period 20 ms
	d := NewDir(Params{Trace: tr}, 0, 1, 1)
	// Idle for 1000 ms + 15 ms: the next opportunity is loop 51 at 20 ms,
	// i.e. 1020 ms (1000 + 10 was before arrival and is wasted).
	d.Arrive(1015e6, Packet{Size: 100})
	got := drain(t, d, 2*sec)
	if len(got) != 1 || got[0].T != 1020e6 {
		t.Fatalf("got %+v, want delivery at 1020 ms", got)
	}
}

func TestTraceFromFirstPacket(t *testing.T) {
	tr := &Trace{MS: []int64{10, 20}}
	d := NewDir(Params{Trace: tr, TraceFromFirstPacket: true}, 0, 1, 1)
	d.Arrive(5e9, Packet{Size: 100})
	got := drain(t, d, 6*sec)
	if len(got) != 1 || got[0].T != 5e9+10e6 {
		t.Fatalf("got %+v", got)
	}
}

func TestDroptailPackets(t *testing.T) {
	d := NewDir(Params{RateBps: 12e6, QueuePackets: 10}, 0, 1, 1)
	saturate(d, 0, 30, 1500)
	out := drain(t, d, sec)
	drops := 0
	for _, ok := d.PopDropped(); ok; _, ok = d.PopDropped() {
		drops++
	}
	// One packet goes straight into transmission, 10 wait, 19 drop.
	s := d.Snapshot()
	if len(out) != 11 || drops != 19 || s.QueueDrops != 19 || s.QueueHWMPkts != 10 || s.QueueHWMBytes != 15000 {
		t.Fatalf("out %d drops %d stats %+v", len(out), drops, s)
	}
	if s.PacketsIn != 30 || s.PacketsOut != 11 || s.BytesOut != 11*1500 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDroptailBytes(t *testing.T) {
	d := NewDir(Params{RateBps: 12e6, QueueBytes: 3000}, 0, 1, 1)
	d.Arrive(0, Packet{Size: 1500}) // in transit
	d.Arrive(0, Packet{Size: 1000})
	d.Arrive(0, Packet{Size: 1500})
	d.Arrive(0, Packet{Size: 600}) // 2500+600 > 3000: drop
	d.Arrive(0, Packet{Size: 500}) // 3000: fits
	d.Advance(0)
	s := d.Snapshot()
	if s.QueueDrops != 1 || s.QueueHWMBytes != 3000 || s.QueueHWMPkts != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLossRate(t *testing.T) {
	for _, p := range []float64{0.01, 0.05, 0.3} {
		d := NewDir(Params{Loss: p}, 0, 42, 1)
		const n = 200000
		lost := 0
		for i := 0; i < n; i++ {
			if !d.Arrive(int64(i), Packet{Size: 100}) {
				lost++
			}
		}
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(lost)-n*p) > 5*sd {
			t.Errorf("loss %.2f: %d of %d lost, want %.0f ± %.0f", p, lost, n, n*p, 5*sd)
		}
		if d.Snapshot().RandomDrops != int64(lost) {
			t.Errorf("random_drops counter mismatch")
		}
	}
}

func TestLossDeterministicPerSeed(t *testing.T) {
	pattern := func(seed uint64) (s []bool) {
		d := NewDir(Params{Loss: 0.1}, 0, seed, 1)
		for i := 0; i < 1000; i++ {
			s = append(s, d.Arrive(0, Packet{Size: 1}))
		}
		return s
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	same, diff := true, false
	for i := range a {
		same = same && a[i] == b[i]
		diff = diff || a[i] != c[i]
	}
	if !same || !diff {
		t.Fatalf("same seed equal: %v, different seed differs: %v", same, diff)
	}
}

func TestHistQuantiles(t *testing.T) {
	var h Hist
	for i := int64(1); i <= 1000; i++ {
		h.Add(i * 1000) // 1..1000 µs
	}
	h.Add(300e6) // overflow
	s := h.Summary()
	if s.N != 1001 || s.P50 < 499 || s.P50 > 502 || s.Max != 300000 || s.P99 < 985 || s.P99 > 995 {
		t.Fatalf("summary %+v", s)
	}
}
