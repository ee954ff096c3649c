package tun

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/link"
)

// readBatch bounds the packets read from one device per wake-up;
// waitMS bounds one epoll_wait (the timerfd normally wakes it first).
const (
	readBatch = 64
	waitMS    = 100
)

type loop struct {
	srv, cli, tfd, ep, stop int
	down, up                *link.Dir
	pool                    *pool
	armed                   int64
	evs                     [8]unix.EpollEvent
	scratch                 []byte // sink for packets dropped without a buffer
	st                      Stats
}

func newLoop(o Options, stop int) (*loop, error) {
	lp := &loop{srv: -1, cli: -1, tfd: -1, ep: -1, stop: stop, armed: link.Never}
	err := lp.open(o)
	if err != nil {
		lp.close()
		return nil, err
	}
	lp.st.SchedFIFO = realtime(o.FIFOPrio)
	lp.st.StartNs = monotonic()
	lp.down = link.NewDir(o.Down, lp.st.StartNs, o.Seed, 1)
	lp.up = link.NewDir(o.Up, lp.st.StartNs, o.Seed, 2)
	lp.pool = newPool(o.MTU + 64)
	return lp, nil
}

func (lp *loop) open(o Options) error {
	var err error
	if lp.srv, err = openIn(o.SrvNS, o.SrvDev); err != nil {
		return err
	}
	if lp.cli, err = openIn(o.CliNS, o.CliDev); err != nil {
		return err
	}
	if lp.tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		return fmt.Errorf("%w: timerfd: %v", ErrTUN, err)
	}
	if lp.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("%w: epoll: %v", ErrTUN, err)
	}
	for _, fd := range []int{lp.srv, lp.cli, lp.tfd, lp.stop} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(lp.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("%w: epoll_ctl: %v", ErrTUN, err)
		}
	}
	return nil
}

func (lp *loop) close() {
	for _, fd := range []int{lp.srv, lp.cli, lp.tfd, lp.ep} {
		closeFD(fd)
	}
}

// run is the data path: wait, ingest arrivals, emit due packets, re-arm.
func (lp *loop) run() (Stats, error) {
	for stopped := false; !stopped; lp.st.Iterations++ {
		if err := lp.arm(); err != nil {
			return lp.stats(), err
		}
		n, err := epollWait(lp.ep, lp.evs[:], waitMS)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return lp.stats(), fmt.Errorf("%w: epoll_wait: %v", ErrTUN, err)
		}
		for _, ev := range lp.evs[:max(n, 0)] {
			stopped = lp.dispatch(int(ev.Fd)) || stopped
		}
		lp.emit(lp.down, lp.cli)
		lp.emit(lp.up, lp.srv)
	}
	return lp.stats(), nil
}

func (lp *loop) dispatch(fd int) (stop bool) {
	var b [8]byte
	switch fd {
	case lp.srv:
		lp.ingest(lp.srv, lp.down)
	case lp.cli:
		lp.ingest(lp.cli, lp.up)
	case lp.tfd:
		_, _ = unix.Read(lp.tfd, b[:])
	case lp.stop:
		return true
	}
	return false
}

// ingest reads up to readBatch packets from fd into direction d.
func (lp *loop) ingest(fd int, d *link.Dir) {
	for i := 0; i < readBatch; i++ {
		id, ok := lp.pool.get()
		if !ok {
			lp.st.PoolDrops++
			lp.discard(fd)
			return
		}
		n, err := unix.Read(fd, lp.pool.bufs[id])
		if err != nil || n <= 0 {
			lp.pool.put(id)
			return
		}
		if !d.Arrive(monotonic(), link.Packet{ID: id, Size: int32(n)}) {
			lp.pool.put(id)
		}
	}
}

// discard reads and drops one packet when no buffer is free.
func (lp *loop) discard(fd int) {
	if lp.scratch == nil {
		lp.scratch = make([]byte, 65536)
	}
	_, _ = unix.Read(fd, lp.scratch)
}

// emit advances d to now and writes every due packet to fd.
func (lp *loop) emit(d *link.Dir, fd int) {
	d.Advance(monotonic())
	for p, ok := d.PopDropped(); ok; p, ok = d.PopDropped() {
		lp.pool.put(p.ID)
	}
	for p, ok := d.PopDelivered(); ok; p, ok = d.PopDelivered() {
		if _, err := unix.Write(fd, lp.pool.bufs[p.ID][:p.Size]); err != nil {
			lp.st.WriteErrs++
		}
		d.Hist.Add(monotonic() - p.T)
		lp.pool.put(p.ID)
	}
}

// arm programs the timerfd for the earliest pending event.
func (lp *loop) arm() error {
	next := min(lp.down.Next(), lp.up.Next())
	if next == lp.armed {
		return nil
	}
	lp.armed = next
	var its unix.ItimerSpec
	if next != link.Never {
		its.Value = unix.NsecToTimespec(max(next, 1))
	}
	if err := unix.TimerfdSettime(lp.tfd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		return fmt.Errorf("%w: timerfd_settime: %v", ErrTUN, err)
	}
	return nil
}

func (lp *loop) stats() Stats {
	st := lp.st
	st.Down, st.Up = lp.down.Snapshot(), lp.up.Snapshot()
	st.CPU = rusage(monotonic() - st.StartNs)
	return st
}
