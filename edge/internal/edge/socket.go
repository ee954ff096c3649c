package edge

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// SocketOpts are the setsockopt knobs of a configuration; zero values of
// the size/rate knobs mean "leave the kernel default".
type SocketOpts struct {
	Congestion   string // TCP_CONGESTION
	SndBuf       int    // SO_SNDBUF (0 = kernel autotuning)
	MaxPacing    uint64 // SO_MAX_PACING_RATE in bytes/s (0 = unlimited)
	NotSentLowat int    // TCP_NOTSENT_LOWAT (0 = kernel default)
	NoDelay      bool   // TCP_NODELAY (always set: Go turns it on by default)
}

func socketOpts(full map[string]any) SocketOpts {
	n := func(k string) int64 { v, _ := knobs.Int(full[k]); return v }
	cc, _ := full["tcp.congestion_control"].(string)
	nd, _ := full["tcp.nodelay"].(bool)
	return SocketOpts{Congestion: cc, SndBuf: int(n("tcp.sndbuf_bytes")), MaxPacing: uint64(n("tcp.max_pacing_rate_bps")),
		NotSentLowat: int(n("tcp.notsent_lowat_bytes")), NoDelay: nd}
}

// SocketStats counts setsockopt failures per option; never fatal.
type SocketStats struct {
	Applied atomic.Int64
	Failed  atomic.Int64
	LastErr atomic.Value // string
}

// apply sets the options on c (a *net.TCPConn) and returns every failure.
func (o SocketOpts) apply(c net.Conn) []error {
	sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return []error{fmt.Errorf("%w: %T has no raw socket", ErrSocket, c)}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return []error{fmt.Errorf("%w: %v", ErrSocket, err)}
	}
	var errs []error
	if err := raw.Control(func(fd uintptr) { errs = o.setAll(int(fd)) }); err != nil {
		return []error{fmt.Errorf("%w: %v", ErrSocket, err)}
	}
	return errs
}

func (o SocketOpts) setAll(fd int) []error {
	var errs []error
	keep := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrSocket, name, err))
		}
	}
	if o.Congestion != "" {
		keep("TCP_CONGESTION", unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion))
	}
	if o.SndBuf > 0 {
		keep("SO_SNDBUF", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, o.SndBuf))
	}
	if o.MaxPacing > 0 {
		keep("SO_MAX_PACING_RATE", unix.SetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, o.MaxPacing))
	}
	if o.NotSentLowat > 0 {
		keep("TCP_NOTSENT_LOWAT", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, o.NotSentLowat))
	}
	keep("TCP_NODELAY", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, boolInt(o.NoDelay)))
	return errs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
