package tun

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// realtime puts the calling thread (only) into SCHED_FIFO at prio, with
// reset-on-fork so nothing it spawns inherits the policy, and sets a 1 ns
// timer slack. Failure is a warning, not an error.
func realtime(prio int) bool {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if prio == 0 {
		return false
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO,
		Priority: uint32(prio), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		fmt.Fprintf(os.Stderr, "tailor-link: warning: SCHED_FIFO %d failed (%v); timing will be noisier\n", prio, err)
		return false
	}
	return true
}

// monotonic is CLOCK_MONOTONIC in ns, read through the vDSO by the
// runtime (unix.ClockGettime would be a real syscall per packet).
//
//go:linkname monotonic runtime.nanotime
func monotonic() int64

// epollWait is epoll_wait as a raw system call: the runtime does not see
// the thread leave, so it never hands the P away and the (SCHED_FIFO)
// thread never waits for a normal-priority thread to hand it back. With
// unix.EpollWait the link was measured up to 60-90 ms late under CPU
// contention; raw, the worst case is a few ms (sysmon's 10 ms preemption).
// A signal (preemption, GC) interrupts it with EINTR.
func epollWait(ep int, evs []unix.EpollEvent, ms int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep),
		uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), uintptr(ms), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Now is the clock the link runs on, for callers aligning to Stats.
func Now() int64 { return monotonic() }

// CPU is the rusage of the link thread and of the whole process.
type CPU struct {
	ThreadUserS float64 `json:"thread_user_s"`
	ThreadSysS  float64 `json:"thread_sys_s"`
	ProcUserS   float64 `json:"process_user_s"`
	ProcSysS    float64 `json:"process_sys_s"`
	WallS       float64 `json:"wall_s"`
	// ThreadCoreShare is (user+sys)/wall of the link thread: the share of
	// one core it used.
	ThreadCoreShare float64 `json:"thread_core_share"`
}

func rusage(wallNs int64) CPU {
	var t, p unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &t)
	_ = unix.Getrusage(unix.RUSAGE_SELF, &p)
	c := CPU{ThreadUserS: tv(t.Utime), ThreadSysS: tv(t.Stime),
		ProcUserS: tv(p.Utime), ProcSysS: tv(p.Stime), WallS: float64(wallNs) / 1e9}
	if c.WallS > 0 {
		c.ThreadCoreShare = (c.ThreadUserS + c.ThreadSysS) / c.WallS
	}
	return c
}

func tv(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
