package edge

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tailor-project/tailor/edge/internal/edge/tlsfp"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Conn is an accepted TCP connection; the handshake stores its state.
type Conn struct {
	net.Conn
	Accepted time.Time
	state    atomic.Pointer[ConnState]
}

// State is the decision made in the handshake (nil before it).
func (c *Conn) State() *ConnState { return c.state.Load() }

// ConnState is what the handshake learned and decided about a connection.
type ConnState struct {
	Decision
	Addr         netip.Addr
	Prefix       string // client_prefix for telemetry
	SNI          string
	JA3, JA4     string
	TableVersion int64
	DecideNs     int64 // time spent classifying + resolving
}

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, Accepted: time.Now()}, nil
}

// configForClient runs after the ClientHello and before the ServerHello:
// classify, resolve, sample, apply socket knobs, return the pre-built config.
func (s *Server) configForClient(h *tls.ClientHelloInfo) (*tls.Config, error) {
	start := time.Now()
	plan := s.plan.Load()
	st := classify(h, plan)
	st.DecideNs = time.Since(start).Nanoseconds()
	c, ok := h.Conn.(*Conn)
	if !ok {
		return st.Conf.TLS, nil
	}
	c.state.Store(st)
	if s.cfg.ApplySocket {
		s.applySocket(c, st.Conf.Socket)
	}
	if s.OnDecision != nil {
		s.OnDecision(c, st)
	}
	return st.Conf.TLS, nil
}

func classify(h *tls.ClientHelloInfo, plan *Plan) *ConnState {
	addr := remoteAddr(h.Conn)
	st := &ConnState{Addr: addr, Prefix: clientPrefix(addr), SNI: h.ServerName, JA3: tlsfp.JA3(h), JA4: tlsfp.JA4(h), TableVersion: plan.Table.Version}
	st.Decision = plan.Decide(rules.Conn{Addr: addr, SNI: h.ServerName}, rand.Float64(), rand.Float64())
	return st
}

func remoteAddr(c net.Conn) netip.Addr {
	if c == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (s *Server) applySocket(c *Conn, o SocketOpts) {
	errs := o.apply(c.Conn)
	s.Socket.Applied.Add(1)
	if len(errs) > 0 {
		s.Socket.Failed.Add(int64(len(errs)))
		s.Socket.LastErr.Store(errs[0].Error())
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
	return nil
}
