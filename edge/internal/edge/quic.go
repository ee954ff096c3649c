package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/tailor-project/tailor/edge/internal/edge/tlsfp"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// quic-go's defaults for the auto-tuning ceilings of the receive windows;
// a knob above them raises the ceiling to the knob.
const (
	quicMaxStreamWindow = 6 << 20
	quicMaxConnWindow   = 15 << 20
)

// quicConfig maps a configuration's quic.* knobs onto quic-go's Config,
// which becomes the connection's transport parameters.
func quicConfig(full map[string]any) *quic.Config {
	n := func(k string) int64 { v, _ := knobs.Int(full[k]); return v }
	sw, cw := uint64(n("quic.initial_stream_receive_window")), uint64(n("quic.initial_connection_receive_window"))
	return &quic.Config{
		MaxIdleTimeout:                 time.Duration(n("quic.max_idle_timeout_ms")) * time.Millisecond,
		InitialStreamReceiveWindow:     sw,
		MaxStreamReceiveWindow:         max(sw, quicMaxStreamWindow),
		InitialConnectionReceiveWindow: cw,
		MaxConnectionReceiveWindow:     max(cw, quicMaxConnWindow),
		MaxIncomingStreams:             n("quic.max_incoming_streams"),
		InitialPacketSize:              uint16(n("quic.initial_packet_size")),
	}
}

// quicConn carries a QUIC connection's state from quic-go's per-connection
// hooks to its requests (through the connection context).
type quicConn struct {
	state atomic.Pointer[ConnState]
	start time.Time // the first Initial packet
}

type quicKey struct{}

// quicServer is the HTTP/3 side of a Server.
type quicServer struct {
	udp *net.UDPConn
	tr  *quic.Transport
	ln  *quic.Listener
	h3  *http3.Server
}

// listenQUIC opens UDP on the TCP listener's address and port.
func (s *Server) listenQUIC(tcp net.Addr) (*quicServer, error) {
	ta, ok := tcp.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("%w: --quic needs a TCP listener, got %T", ErrConfig, tcp)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.IP, Port: ta.Port, Zone: ta.Zone})
	if err != nil {
		return nil, fmt.Errorf("%w: --quic: %v", ErrConfig, err)
	}
	q := &quicServer{udp: udp, tr: &quic.Transport{Conn: udp, ConnContext: s.quicConnContext}}
	tlsConf := s.base.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	tlsConf.MinVersion = tls.VersionTLS13
	tlsConf.GetConfigForClient = s.quicClientHello
	qconf := &quic.Config{GetConfigForClient: s.quicConfigForClient}
	if s.cfg.Static { // the table default for every connection, no hooks
		q.tr.ConnContext, tlsConf.GetConfigForClient, qconf = nil, nil, s.plan.Load().Default.QUIC.Clone()
	}
	q.ln, err = q.tr.Listen(tlsConf, qconf)
	if err != nil {
		_ = udp.Close()
		return nil, fmt.Errorf("%w: --quic: %v", ErrConfig, err)
	}
	q.h3 = &http3.Server{Handler: s.h1.Handler, IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		ConnContext: s.h3ConnContext}
	s.altSvc.Store(`h3=":` + strconv.Itoa(ta.Port) + `"; ma=86400`)
	return q, nil
}

func (q *quicServer) serve() error {
	err := q.h3.ServeListener(q.ln)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
		return nil
	}
	return err
}

func (q *quicServer) close() error {
	err := q.h3.Close()
	_ = q.ln.Close()
	_ = q.tr.Close()
	_ = q.udp.Close()
	return err
}

// quicConfigForClient runs on a new connection's first Initial packet. The
// transport parameters are fixed here, before quic-go parses the
// ClientHello, so only the client address is known: rules naming an SNI or
// a device cannot choose a QUIC connection's configuration.
func (s *Server) quicConfigForClient(info *quic.ClientInfo) (*quic.Config, error) {
	start := time.Now()
	addr := addrOf(info.RemoteAddr)
	plan := s.planFor(addr)
	st := &ConnState{Addr: addr, Device: UnknownDevice, TableVersion: plan.Table.Version}
	st.Decision = plan.Decide(rules.Conn{Addr: addr}, rand.Uint64())
	st.DecideNs = time.Since(start).Nanoseconds()
	if s.geo != nil && (s.sink != nil || s.onQUIC.Load() != nil) {
		st.ASN, st.Region = s.geo.Lookup(addr)
	}
	if s.metrics != nil {
		s.metrics.decided("quic", st)
	}
	qc := &quicConn{start: start}
	qc.state.Store(st)
	s.pendingQUIC.Store(info, qc)
	return st.Conf.QUIC, nil
}

// quicConnContext runs right after quicConfigForClient with the same
// ClientInfo and puts the connection's state into its context.
func (s *Server) quicConnContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	v, ok := s.pendingQUIC.LoadAndDelete(info)
	if !ok { // not reachable: quic-go calls GetConfigForClient first
		qc := &quicConn{start: time.Now()}
		st := &ConnState{Decision: Decision{Conf: s.plan.Load().Default}, Prefix: "unknown", Device: UnknownDevice}
		st.Config, st.P = st.Conf.ID, 1
		qc.state.Store(st)
		v = qc
	}
	return context.WithValue(ctx, quicKey{}, v), nil
}

// quicClientHello records SNI, fingerprints and device of a QUIC
// connection; it keeps the listener's tls.Config (ALPN h3).
func (s *Server) quicClientHello(h *tls.ClientHelloInfo) (*tls.Config, error) {
	qc, ok := h.Context().Value(quicKey{}).(*quicConn)
	if !ok {
		return nil, nil
	}
	st := *qc.state.Load()
	st.SNI, st.JA4 = s.Sanitized.sni(h.ServerName), tlsfp.JA4QUIC(h)
	if s.onQUIC.Load() != nil { // only the test hook reads the JA3
		st.JA3 = tlsfp.JA3(h)
	}
	st.Device = s.devices.Device(st.JA4)
	qc.state.Store(&st)
	if s.metrics != nil {
		s.metrics.device("quic", st.Device)
	}
	return nil, nil
}

// h3ConnContext runs when the handshake is complete: QUIC's RTT estimate
// then covers the handshake packets only.
func (s *Server) h3ConnContext(ctx context.Context, c *quic.Conn) context.Context {
	qc, ok := ctx.Value(quicKey{}).(*quicConn)
	if !ok {
		return ctx
	}
	st := *qc.state.Load()
	st.HandshakeRTT = float64(c.ConnectionStats().SmoothedRTT.Microseconds()) / 1000
	qc.state.Store(&st)
	if s.metrics != nil {
		s.metrics.handshakeRTT("quic", st.HandshakeRTT)
	}
	if s.connRecords() {
		s.watchQUIC(qc, c)
	}
	if f := s.onQUIC.Load(); f != nil {
		(*f)(c, &st)
	}
	return ctx
}

func addrOf(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	if ua, ok := a.(*net.UDPAddr); ok { // no string round trip (it is on every QUIC connection's path)
		return ua.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
