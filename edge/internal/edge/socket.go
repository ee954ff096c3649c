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
	RcvBuf       int    // SO_RCVBUF (0 = kernel autotuning)
	MaxPacing    uint64 // SO_MAX_PACING_RATE in bytes/s (0 = unlimited)
	NotSentLowat int    // TCP_NOTSENT_LOWAT (0 = kernel default)
	NoDelay      bool   // TCP_NODELAY (Go turns it on for every TCP connection; false costs a setsockopt)
}

func socketOpts(full map[string]any) SocketOpts {
	n := func(k string) int64 { v, _ := knobs.Int(full[k]); return v }
	cc, _ := full["tcp.congestion_control"].(string)
	nd, _ := full["tcp.nodelay"].(bool)
	return SocketOpts{Congestion: cc, SndBuf: int(n("tcp.sndbuf_bytes")), RcvBuf: int(n("tcp.rcvbuf_bytes")), MaxPacing: uint64(n("tcp.max_pacing_rate_bps")),
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
	var errs []error
	if err := control(c, func(fd int) { errs = o.setAll(fd, goNoDelay(c)) }); err != nil {
		return []error{err}
	}
	return errs
}

// control runs f on c's socket (one RawConn.Control: one fd reference,
// one allocation).
func control(c net.Conn, f func(fd int)) error {
	sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return fmt.Errorf("%w: %T has no raw socket", ErrSocket, c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSocket, err)
	}
	if err := raw.Control(func(fd uintptr) { f(int(fd)) }); err != nil {
		return fmt.Errorf("%w: %v", ErrSocket, err)
	}
	return nil
}

// goNoDelay: Go's net package turns TCP_NODELAY on for every TCP
// connection it creates (accepted ones included), so on a *net.TCPConn
// nobody else has touched, setting it to 1 again is a wasted syscall.
func goNoDelay(c net.Conn) bool { _, ok := c.(*net.TCPConn); return ok }

// setAll sets the options on fd; nodelayOn says TCP_NODELAY is known to be
// on already (then only NoDelay false costs a syscall).
func (o SocketOpts) setAll(fd int, nodelayOn bool) []error {
	var errs []error
	keep := func(name string, err error) {
		if err != nil {
			errs = append(errs, &SocketError{Option: name, Knob: optionKnobs[name], Err: err})
		}
	}
	if o.Congestion != "" {
		keep("TCP_CONGESTION", unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion))
	}
	if o.SndBuf > 0 {
		keep("SO_SNDBUF", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, o.SndBuf))
	}
	if o.RcvBuf > 0 {
		keep("SO_RCVBUF", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, o.RcvBuf))
	}
	if o.MaxPacing > 0 {
		keep("SO_MAX_PACING_RATE", unix.SetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, o.MaxPacing))
	}
	if o.NotSentLowat > 0 {
		keep("TCP_NOTSENT_LOWAT", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, o.NotSentLowat))
	}
	if !o.NoDelay || !nodelayOn {
		keep("TCP_NODELAY", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, boolInt(o.NoDelay)))
	}
	return errs
}

// SocketError is one failed setsockopt; it matches ErrSocket and its errno.
type SocketError struct {
	Option string // e.g. TCP_CONGESTION
	Knob   string // the registry knob it applies, e.g. tcp.congestion_control
	Err    error
}

func (e *SocketError) Error() string   { return fmt.Sprintf("%v: %s: %v", ErrSocket, e.Option, e.Err) }
func (e *SocketError) Unwrap() []error { return []error{ErrSocket, e.Err} }

// optionKnobs names the knob behind each option setAll sets.
var optionKnobs = map[string]string{"TCP_CONGESTION": "tcp.congestion_control", "SO_SNDBUF": "tcp.sndbuf_bytes",
	"SO_RCVBUF": "tcp.rcvbuf_bytes", "SO_MAX_PACING_RATE": "tcp.max_pacing_rate_bps",
	"TCP_NOTSENT_LOWAT": "tcp.notsent_lowat_bytes", "TCP_NODELAY": "tcp.nodelay"}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
