package edge

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/edge/tlsfp"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Conn is an accepted TCP connection; the handshake stores its state.
type Conn struct {
	net.Conn
	Accepted time.Time
	state    atomic.Pointer[ConnState]
	tel      *connTelemetry // nil: no "connection" record (connrecord.go)
}

// State is the decision made in the handshake (nil before it).
func (c *Conn) State() *ConnState { return c.state.Load() }

// ConnState is what the handshake learned and decided about a connection.
type ConnState struct {
	Decision
	Addr         netip.Addr
	Prefix       string // client_prefix for telemetry; "" = derived from Addr when reported
	SNI          string
	JA3, JA4     string // JA3 only with an OnDecision (TCP) / SetOnQUICDecision hook: nothing else reads it
	Device       string // from the JA4 through the device map; "unknown" when unmapped
	TableVersion int64
	DecideNs     int64   // time spent classifying + resolving
	HandshakeRTT float64 // ms: TCP_INFO rtt at the ClientHello (TCP; read only with telemetry, --metrics or an OnDecision hook) or QUIC's smoothed RTT after the handshake; 0 = not measured
	ASN          int64   // from --geoip-asn (looked up only with telemetry or an OnDecision hook); 0 = unknown
	Region       string  // "CC" or "CC-SUB" from --geoip-region; "" = unknown
}

// listener wraps accepted sockets in *Conn; with Config.Static it applies
// the one configuration's socket knobs at accept, as selection would in
// the handshake.
type listener struct {
	net.Listener
	s *Server
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	s := l.s
	ec := &Conn{Conn: c, Accepted: time.Now()}
	if s.connRecords() {
		ec.tel = &connTelemetry{srv: s}
		s.live.Store(ec, struct{}{})
	}
	if s.cfg.Static && s.cfg.ApplySocket {
		s.applySocket(ec, s.plan.Load().Default.Socket)
	}
	return ec, nil
}

// configForClient runs after the ClientHello and before the ServerHello:
// classify, resolve, sample, apply socket knobs, return the pre-built config.
// It is on every handshake's critical path, so what only telemetry or the
// test hook read (the TCP_INFO handshake RTT, the JA3) is skipped without
// them.
func (s *Server) configForClient(h *tls.ClientHelloInfo) (*tls.Config, error) {
	start := time.Now()
	plan := s.planFor(remoteAddr(h.Conn))
	st := classify(h, plan, s.devices, s.OnDecision != nil, &s.Sanitized)
	st.DecideNs = time.Since(start).Nanoseconds()
	c, ok := h.Conn.(*Conn)
	if !ok {
		return st.Conf.TLS, nil
	}
	if s.geo != nil && (s.sink != nil || s.OnDecision != nil) {
		st.ASN, st.Region = s.geo.Lookup(st.Addr)
	}
	// one RawConn.Control for the TCP_INFO read and the socket knobs
	var errs []error
	var err error
	if rtt := s.sink != nil || s.OnDecision != nil || s.metrics != nil; rtt || s.cfg.ApplySocket {
		err = control(c.Conn, func(fd int) {
			if rtt {
				st.HandshakeRTT = tcpInfoRTT(fd)
			}
			if s.cfg.ApplySocket {
				errs = st.Conf.Socket.setAll(fd, goNoDelay(c.Conn))
			}
		})
	}
	c.state.Store(st)
	if s.cfg.ApplySocket {
		if err != nil {
			errs = []error{err}
		}
		s.socketDone(errs)
	}
	if m := s.metrics; m != nil {
		m.decided("tcp", st)
		m.device("tcp", st.Device)
		m.handshakeRTT("tcp", st.HandshakeRTT)
	}
	if s.OnDecision != nil {
		s.OnDecision(c, st)
	}
	return st.Conf.TLS, nil
}

// classify fingerprints, resolves and samples; ja3: also compute the JA3.
// What the client wrote (the SNI) is sanitised first (san counts it).
func classify(h *tls.ClientHelloInfo, plan *Plan, devices *DeviceMap, ja3 bool, san *SanitizeStats) *ConnState {
	addr := remoteAddr(h.Conn)
	st := &ConnState{Addr: addr, SNI: san.sni(h.ServerName), JA4: tlsfp.JA4(h), TableVersion: plan.Table.Version}
	if ja3 {
		st.JA3 = tlsfp.JA3(h)
	}
	st.Device = devices.Device(st.JA4)
	st.Decision = plan.Decide(rules.Conn{Addr: addr, SNI: st.SNI, Device: st.Device}, rand.Uint64())
	return st
}

// SanitizeStats counts client-supplied strings the edge ignored because
// they break the telemetry schema's bounds (spec/telemetry.schema.json):
// such an SNI is treated as absent for rule matching and telemetry.
type SanitizeStats struct {
	SNI atomic.Int64 // longer than 253 bytes or not [A-Za-z0-9._-]
}

// sni returns name, or "" (counted) when it is not a plain DNS name.
func (san *SanitizeStats) sni(name string) string {
	if name == "" || telemetry.ValidSNI(name) {
		return name
	}
	if san != nil {
		san.SNI.Add(1)
	}
	return ""
}

// tcpInfoRTT is the kernel's RTT estimate (TCP_INFO tcpi_rtt) in ms; read
// when the ClientHello arrives, the server has sent nothing but the
// SYN/ACK yet, so the only sample is SYN/ACK -> ACK: the TCP handshake RTT.
// 0 when unavailable.
func tcpInfoRTT(fd int) float64 {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return float64(ti.Rtt) / 1000
}

func remoteAddr(c net.Conn) netip.Addr {
	if c == nil {
		return netip.Addr{}
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok { // no string round trip
		return ta.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (s *Server) applySocket(c *Conn, o SocketOpts) { s.socketDone(o.apply(c.Conn)) }

// socketDone counts one connection's setsockopt outcome.
func (s *Server) socketDone(errs []error) {
	s.Socket.Applied.Add(1)
	if len(errs) > 0 {
		s.Socket.Failed.Add(int64(len(errs)))
		s.Socket.LastErr.Store(errs[0].Error())
		if s.metrics != nil {
			s.metrics.applyFailed(errs)
		}
	}
}

type connKey struct{}

// connContext puts the *Conn into every request context of the connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if ec, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, ec)
	}
	return ctx
}

func stateFrom(ctx context.Context) *ConnState {
	if c, ok := ctx.Value(connKey{}).(*Conn); ok {
		return c.State()
	}
	if q, ok := ctx.Value(quicKey{}).(*quicConn); ok {
		return q.state.Load()
	}
	return nil
}
