package link

// traceLink delivers bytes at trace opportunities, mahimahi style: each
// opportunity carries OppBytes bytes; a packet may span opportunities and
// is delivered at the one carrying its last byte; unused bytes are lost.
type traceLink struct {
	tr     *Trace
	period int64 // ns
	base   int64 // ns: start of the current loop of the trace
	idx    int   // next unused opportunity
	busy   bool
	cur    Packet
	left   int32 // bytes of cur not yet sent
}

func newTraceLink(tr *Trace, start int64) *traceLink {
	return &traceLink{tr: tr, period: tr.Period() * 1e6, base: start}
}

func (l *traceLink) nextOpp() int64 { return l.base + l.tr.MS[l.idx]*1e6 }

func (l *traceLink) use() {
	l.idx++
	if l.idx == len(l.tr.MS) {
		l.idx, l.base = 0, l.base+l.period
	}
}

// serve burns every opportunity at or before t (mahimahi rationalize).
func (l *traceLink) serve(q *queue, t int64, done *ring) {
	if !l.busy && q.empty() {
		l.skipTo(t)
		return
	}
	for at := l.nextOpp(); at <= t; at = l.nextOpp() {
		l.use()
		l.fill(q, at, done)
		if !l.busy && q.empty() {
			l.skipTo(t)
			return
		}
	}
}

// fill spends one opportunity's bytes on the queue head(s).
func (l *traceLink) fill(q *queue, at int64, done *ring) {
	for budget := int32(OppBytes); budget > 0; {
		if !l.busy {
			if q.empty() {
				return
			}
			l.cur, l.busy = q.pop(), true
			l.left = l.cur.Size
		}
		n := min(budget, l.left)
		l.left -= n
		budget -= n
		if l.left == 0 {
			l.cur.T = at
			done.push(l.cur)
			l.busy = false
		}
	}
}

// skipTo wastes all opportunities at or before t in O(log n).
func (l *traceLink) skipTo(t int64) {
	if t < l.nextOpp() {
		return
	}
	l.base += (t - l.base) / l.period * l.period
	rel := t - l.base
	l.idx = firstAfter(l.tr.MS, rel)
	if l.idx == len(l.tr.MS) {
		l.idx, l.base = 0, l.base+l.period
	}
}

func (l *traceLink) next(q *queue) int64 {
	if l.busy || !q.empty() {
		return l.nextOpp()
	}
	return Never
}

// firstAfter is the index of the first ms entry whose time in ns is > rel
// (len(ms) if none); a closure-free binary search.
func firstAfter(ms []int64, rel int64) int {
	lo, hi := 0, len(ms)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ms[mid]*1e6 > rel {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
