package link

// Packet is a handle to one IP packet. The model never touches payload
// bytes; ID lets the caller find its buffer.
type Packet struct {
	ID   int32 // caller's buffer handle
	Size int32 // IP bytes
	T    int64 // ns: delay-line release, queue entry, or delivery time
}

// ring is a growable FIFO of packets (power-of-two capacity).
type ring struct {
	buf  []Packet
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) push(p Packet) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = p
	r.n++
}

func (r *ring) peek() *Packet { return &r.buf[r.head] }

func (r *ring) pop() Packet {
	p := r.buf[r.head]
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return p
}

func (r *ring) grow() {
	nb := make([]Packet, max(64, 2*len(r.buf)))
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf, r.head = nb, 0
}
