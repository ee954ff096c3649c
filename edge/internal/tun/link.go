package tun

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/link"
)

// Options configure a running link.
type Options struct {
	SrvNS, CliNS   string      // namespace names (or paths)
	SrvDev, CliDev string      // TUN device names
	MTU            int         // largest packet; buffers are sized from it
	FIFOPrio       int         // SCHED_FIFO priority; 0 = normal scheduling
	Down, Up       link.Params // down = server→client, up = client→server
	Seed           uint64      // loss RNG seed
}

// Stats is what a link reports when it stops.
type Stats struct {
	Down       link.Stats `json:"down"`
	Up         link.Stats `json:"up"`
	PoolDrops  int64      `json:"pool_drops"`
	WriteErrs  int64      `json:"write_errors"`
	SchedFIFO  bool       `json:"sched_fifo"`
	StartNs    int64      `json:"start_monotonic_ns"`
	CPU        CPU        `json:"cpu"`
	Iterations int64      `json:"loop_iterations"`
}

// Link is a running emulator.
type Link struct {
	stopFD int
	done   chan result
}

type result struct {
	st  Stats
	err error
}

// Start creates both TUN devices and starts the event loop on its own
// locked OS thread. It returns once the devices exist (or failed).
func Start(o Options) (*Link, error) {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("%w: eventfd: %v", ErrTUN, err)
	}
	// The link goroutine keeps one P busy (see epollWait); leave one for
	// the rest of the process.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	l := &Link{stopFD: stop, done: make(chan result, 1)}
	ready := make(chan error, 1)
	go l.thread(o, ready)
	if err := <-ready; err != nil {
		<-l.done
		unix.Close(stop)
		return nil, err
	}
	return l, nil
}

// thread owns the OS thread for the link's whole life and never unlocks
// it, so the (possibly SCHED_FIFO) thread dies with the goroutine.
func (l *Link) thread(o Options, ready chan<- error) {
	runtime.LockOSThread()
	lp, err := newLoop(o, l.stopFD)
	ready <- err
	if err != nil {
		l.done <- result{err: err}
		return
	}
	st, err := lp.run()
	lp.close()
	l.done <- result{st: st, err: err}
}

// Stop ends the loop and returns its statistics; packets still in flight
// are discarded and the devices disappear.
func (l *Link) Stop() (Stats, error) {
	var one = [8]byte{1}
	if _, err := unix.Write(l.stopFD, one[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return Stats{}, fmt.Errorf("%w: stop: %v", ErrTUN, err)
	}
	r := <-l.done
	unix.Close(l.stopFD)
	return r.st, r.err
}
