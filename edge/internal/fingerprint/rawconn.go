package fingerprint

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// rawSocket is a TCP socket the probe builds by hand: its MSS is set before the SYN and its local
// port is known before connect, so the ACK filter can name the connection before it exists.
type rawSocket struct {
	fd    int
	local netip.AddrPort
}

// open is the socket of one raw measurement (MSS mss, 0 = the kernel's) and the capture of its
// traffic with the target.
func (p *Prober) open(env *rawEnv, mss int) (*rawSocket, *capture, error) {
	sock, err := newRawSocket(env.src, mss)
	if err != nil {
		return nil, nil, err
	}
	capt, err := openCapture(env.ifindex, env.l2, sock.local, p.Target.Addr)
	if err != nil {
		sock.Close()
		return nil, nil, err
	}
	return sock, capt, nil
}

// newRawSocket makes an IPv4 TCP socket bound to src with TCP_MAXSEG mss (0: the kernel's choice)
// and SO_LINGER 0, so that closing it sends a RST and leaves no half-open state on the server.
func newRawSocket(src netip.Addr, mss int) (*rawSocket, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (*rawSocket, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if mss > 0 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss); err != nil {
			return fail(fmt.Sprintf("TCP_MAXSEG %d", mss), err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return fail("TCP_NODELAY", err)
	}
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		return fail("SO_LINGER", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
		return fail("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return fail("getsockname", fmt.Errorf("unexpected address %T", sa))
	}
	return &rawSocket{fd: fd, local: netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))}, nil
}

// connect completes the handshake (from the client's side) within timeout.
func (s *rawSocket) connect(dst netip.AddrPort, timeout time.Duration) error {
	if err := unix.SetNonblock(s.fd, true); err != nil {
		return err
	}
	err := unix.Connect(s.fd, &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())})
	if err != nil && err != unix.EINPROGRESS {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	pfd := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(pfd, int(timeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("connect %s: %w", dst, err)
	}
	if n == 0 {
		return fmt.Errorf("connect %s: no SYN-ACK within %v", dst, timeout)
	}
	if soErr, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
		return fmt.Errorf("connect %s: %v", dst, unix.Errno(soErr))
	}
	return nil
}

// conn turns the connected socket into a net.Conn (which owns a duplicate of the descriptor).
func (s *rawSocket) conn() (net.Conn, error) {
	f := os.NewFile(uintptr(s.fd), "tailor-probe")
	c, err := net.FileConn(f)
	f.Close()
	s.fd = -1
	return c, err
}

// rttMicros is the socket's smoothed RTT (tcpi_rtt).
func rttMicros(c net.Conn) float64 {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var rtt float64
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			rtt = float64(info.Rtt)
		}
	})
	return rtt
}

func (s *rawSocket) Close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}
