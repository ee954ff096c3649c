package link

// rateLink serialises packets at a fixed bit rate with exact integer
// accounting (the remainder of each division carries over while busy).
type rateLink struct {
	bps    int64
	busy   bool
	cur    Packet
	finish int64 // ns when cur's last byte leaves, or when the link idled
	rem    int64 // carried remainder, in bit-ns units
}

// serve moves packets through the link until time t; done is called with
// each packet stamped with its delivery time.
func (l *rateLink) serve(q *queue, t int64, done *ring) {
	for {
		if !l.busy {
			if q.empty() {
				return
			}
			l.start(q.pop())
		}
		if l.finish > t {
			return
		}
		l.cur.T = l.finish
		done.push(l.cur)
		l.busy = false
	}
}

func (l *rateLink) start(p Packet) {
	begin := l.finish
	if p.T > begin {
		begin, l.rem = p.T, 0
	}
	num := int64(p.Size)*8*1_000_000_000 + l.rem
	l.finish = begin + num/l.bps
	l.rem = num % l.bps
	l.cur, l.busy = p, true
}

func (l *rateLink) next(q *queue) int64 {
	if l.busy {
		return l.finish
	}
	if !q.empty() {
		return q.r.peek().T
	}
	return Never
}
