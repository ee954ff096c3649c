package fingerprint

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// segment is one TCP packet the server sent to the probe, as the probe's interface received it.
// With GSO (loopback, veth) one packet can carry several segments of GSOSize bytes each.
type segment struct {
	At      time.Time // kernel receive time (SO_TIMESTAMPNS)
	Seq     uint32
	Flags   uint8
	Payload int
	GSOSize int // 0: a single segment
	Window  uint16
	Options []byte // TCP options (read on the SYN-ACK)
}

const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagACK = 0x10

	maxPacket = 65536 + 16 // a packet is at most 64 KiB (the probe's MSS keeps it so) + virtio header
)

// segs is how many wire segments the packet stands for.
func (s segment) segs() int {
	if s.GSOSize <= 0 || s.Payload <= s.GSOSize {
		return 1
	}
	return (s.Payload + s.GSOSize - 1) / s.GSOSize
}

// capture reads the server's packets of one connection from an AF_PACKET socket bound to the
// interface the connection uses.
type capture struct {
	fd     int
	vnet   bool  // packets start with a virtio_net_hdr giving the GSO size
	l2     int32 // link-layer header bytes before the IP header
	local  netip.AddrPort
	remote netip.AddrPort
	buf    []byte
	oob    []byte
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openCapture binds to the interface whose link-layer header is l2 bytes long (see l3Offset). It
// is a SOCK_RAW socket because only those deliver the virtio header with the GSO segment size.
func openCapture(ifindex int, l2 int32, local, remote netip.AddrPort) (*capture, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("capture socket: %w", err)
	}
	c := &capture{fd: fd, l2: l2, local: local, remote: remote, buf: make([]byte, maxPacket), oob: make([]byte, 128)}
	c.vnet = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1) == nil
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	tv := unix.Timeval{Usec: 20000} // the read loop re-checks its deadline every 20 ms
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture socket: bind to interface %d: %w", ifindex, err)
	}
	return c, nil
}

func (c *capture) Close() { unix.Close(c.fd) }

// next returns the server's next packet of the connection, or ok=false once deadline passes.
func (c *capture) next(deadline time.Time) (seg segment, ok bool, err error) {
	for time.Now().Before(deadline) {
		n, oobn, _, from, err := unix.Recvmsg(c.fd, c.buf, c.oob, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return seg, false, fmt.Errorf("capture: %w", err)
		}
		if ll, isLL := from.(*unix.SockaddrLinklayer); isLL && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // loopback shows each packet leaving and arriving; keep the arrival
		}
		if seg, ok = c.parse(c.buf[:n]); ok {
			seg.At = rxTime(c.oob[:oobn])
			return seg, true, nil
		}
	}
	return seg, false, nil
}

func rxTime(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
			}
		}
	}
	return time.Now()
}

// parse keeps IPv4/TCP packets from remote to local; the lengths come from the headers, bounded by
// what was received (short frames may carry link padding).
func (c *capture) parse(p []byte) (segment, bool) {
	var s segment
	if c.vnet {
		if len(p) < 10 {
			return s, false
		}
		if p[1] != 0 { // gso_type set
			s.GSOSize = int(binary.LittleEndian.Uint16(p[4:6]))
		}
		p = p[10:]
	}
	if len(p) < int(c.l2) {
		return s, false
	}
	p = p[c.l2:]
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_TCP {
		return s, false
	}
	ihl := int(p[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if total == 0 || total > len(p) {
		total = len(p) // BIG TCP packets carry 0; never read past what arrived
	}
	src, _ := netip.AddrFromSlice(p[12:16])
	dst, _ := netip.AddrFromSlice(p[16:20])
	if ihl < 20 || total < ihl+20 || src != c.remote.Addr() || dst != c.local.Addr() {
		return s, false
	}
	t := p[ihl:total]
	if binary.BigEndian.Uint16(t[0:2]) != c.remote.Port() || binary.BigEndian.Uint16(t[2:4]) != c.local.Port() {
		return s, false
	}
	doff := int(t[12]>>4) * 4
	if doff < 20 || doff > len(t) {
		return s, false
	}
	s.Seq = binary.BigEndian.Uint32(t[4:8])
	s.Flags = t[13]
	s.Window = binary.BigEndian.Uint16(t[14:16])
	s.Options = append([]byte(nil), t[20:doff]...)
	s.Payload = len(t) - doff
	return s, true
}
