package link

// queue is a droptail FIFO limited in packets and/or bytes. It holds
// packets waiting for the link; the packet being sent is not counted
// (as in mahimahi's LinkQueue).
type queue struct {
	r        ring
	bytes    int
	maxPkts  int // 0 = unlimited
	maxBytes int // 0 = unlimited
	hwmPkts  int
	hwmBytes int
}

// admit enqueues p unless a limit would be exceeded.
func (q *queue) admit(p Packet) bool {
	if q.maxPkts > 0 && q.r.len()+1 > q.maxPkts {
		return false
	}
	if q.maxBytes > 0 && q.bytes+int(p.Size) > q.maxBytes {
		return false
	}
	q.r.push(p)
	q.bytes += int(p.Size)
	q.hwmPkts = max(q.hwmPkts, q.r.len())
	q.hwmBytes = max(q.hwmBytes, q.bytes)
	return true
}

func (q *queue) empty() bool { return q.r.len() == 0 }

func (q *queue) pop() Packet {
	p := q.r.pop()
	q.bytes -= int(p.Size)
	return p
}
