package link

import "math/rand/v2"

// Dir is one direction of the emulated link: i.i.d. loss on arrival, a
// constant-delay line, then a droptail queue in front of a rate- or
// trace-driven link. It is driven by a caller-supplied clock (ns), so it
// is deterministic and testable with virtual time.
type Dir struct {
	p     Params
	start int64
	rng   *rand.Rand
	delay ring
	q     queue
	rate  *rateLink
	trace *traceLink
	out   ring // delivered, T = delivery time
	drop  ring // dropped by the queue; caller frees them
	Hist  Hist // send lateness, recorded by the caller
	St    Stats
}

// NewDir builds a direction whose clock starts at start (ns).
func NewDir(p Params, start int64, seed, stream uint64) *Dir {
	d := &Dir{p: p, start: start, rng: rand.New(rand.NewPCG(seed, stream))}
	d.q.maxPkts, d.q.maxBytes = p.QueuePackets, p.QueueBytes
	switch {
	case p.Trace != nil && !p.TraceFromFirstPacket:
		d.trace = newTraceLink(p.Trace, start)
	case p.Trace == nil && p.RateBps > 0:
		d.rate = &rateLink{bps: p.RateBps, finish: start}
	}
	return d
}

// Arrive offers a packet at time now. It returns false if the packet was
// lost; the caller then owns (frees) it.
func (d *Dir) Arrive(now int64, p Packet) bool {
	d.St.PacketsIn++
	d.St.BytesIn += int64(p.Size)
	if d.p.Loss > 0 && d.rng.Float64() < d.p.Loss {
		d.St.RandomDrops++
		return false
	}
	if d.p.Trace != nil && d.trace == nil {
		d.trace = newTraceLink(d.p.Trace, now)
	}
	p.T = now + d.p.DelayNs
	d.delay.push(p)
	return true
}

// Advance runs the model up to time now, in event order.
func (d *Dir) Advance(now int64) {
	for d.delay.len() > 0 && d.delay.peek().T <= now {
		p := d.delay.pop()
		d.serve(p.T)
		d.enqueue(p)
	}
	d.serve(now)
}

func (d *Dir) serve(t int64) {
	switch {
	case d.rate != nil:
		d.rate.serve(&d.q, t, &d.out)
	case d.trace != nil:
		d.trace.serve(&d.q, t, &d.out)
	}
}

func (d *Dir) enqueue(p Packet) {
	if d.rate == nil && d.trace == nil {
		d.out.push(p)
		return
	}
	if !d.q.admit(p) {
		d.St.QueueDrops++
		d.drop.push(p)
	}
	d.serve(p.T)
}

// Next is the earliest time Advance has work to do (Never if idle).
func (d *Dir) Next() int64 {
	t := Never
	if d.delay.len() > 0 {
		t = d.delay.peek().T
	}
	switch {
	case d.rate != nil:
		t = min(t, d.rate.next(&d.q))
	case d.trace != nil:
		t = min(t, d.trace.next(&d.q))
	}
	return t
}

// PopDelivered returns the next delivered packet (T = due time).
func (d *Dir) PopDelivered() (Packet, bool) {
	if d.out.len() == 0 {
		return Packet{}, false
	}
	p := d.out.pop()
	d.St.countOut(p, d.start)
	return p, true
}

// PopDropped returns the next packet dropped by the queue.
func (d *Dir) PopDropped() (Packet, bool) {
	if d.drop.len() == 0 {
		return Packet{}, false
	}
	return d.drop.pop(), true
}

// Backlog is the number of packets held (delay line, queue, in transit).
func (d *Dir) Backlog() int {
	n := d.delay.len() + d.q.r.len() + d.out.len()
	if (d.rate != nil && d.rate.busy) || (d.trace != nil && d.trace.busy) {
		n++
	}
	return n
}

// Snapshot returns the counters with queue marks and latency summary.
func (d *Dir) Snapshot() Stats {
	s := d.St
	s.QueueHWMPkts, s.QueueHWMBytes = d.q.hwmPkts, d.q.hwmBytes
	s.Lateness = d.Hist.Summary()
	s.BytesOutPerSec = append([]int64(nil), d.St.BytesOutPerSec...)
	return s
}
