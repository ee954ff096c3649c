package tun

// maxBuffers bounds the packets held by the link (both directions);
// beyond it arrivals are dropped and counted as pool drops.
const maxBuffers = 1 << 16

// pool hands out packet buffers by id; it allocates lazily and never
// shrinks, so the steady state is allocation-free.
type pool struct {
	bufs [][]byte
	free []int32
	size int
}

func newPool(size int) *pool {
	return &pool{size: size, free: make([]int32, 0, 1024)}
}

func (p *pool) get() (int32, bool) {
	if n := len(p.free); n > 0 {
		id := p.free[n-1]
		p.free = p.free[:n-1]
		return id, true
	}
	if len(p.bufs) >= maxBuffers {
		return 0, false
	}
	p.bufs = append(p.bufs, make([]byte, p.size))
	return int32(len(p.bufs) - 1), true
}

func (p *pool) put(id int32) { p.free = append(p.free, id) }
