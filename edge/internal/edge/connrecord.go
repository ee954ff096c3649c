package edge

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Per-connection telemetry (kind "connection", Config.ConnRecords): one
// record when a connection that got a configuration closes. TCP: at
// Conn.Close, TCP_INFO and TCP_CONGESTION read just before the socket is
// closed. QUIC: when the connection's context ends, quic-go's
// ConnectionStats. Records go to the same bounded sink as the response
// records (beyond its bound they are dropped and counted in "dropped").

// ALPN values of a TCP connection, learned after the handshake.
const (
	protoUnknown uint32 = iota // no request and not h2: handshake failed or no request was made
	protoHTTP11
	protoH2
)

var alpnNames = [...]string{protoUnknown: "", protoHTTP11: "http/1.1", protoH2: "h2"}

// connTelemetry is what a reported TCP connection accumulates; nil on a
// Conn when connection records are off.
type connTelemetry struct {
	srv     *Server
	closed  atomic.Bool
	alpn    atomic.Uint32
	maxRate atomic.Uint64 // bytes/s: max tcpi_delivery_rate over the samples (response ends, close)
}

// Close closes the connection; the first Close of a reported connection
// reads TCP_INFO first and then adds its "connection" record.
func (c *Conn) Close() error {
	t := c.tel
	if t == nil {
		return c.Conn.Close()
	}
	// counted before the race for the first Close: Server.Close, whose own
	// Close may lose that race, then waits for the winner's record
	t.srv.closing.Add(1)
	defer t.srv.closing.Add(-1)
	if !t.closed.CompareAndSwap(false, true) {
		return c.Conn.Close()
	}
	defer t.srv.live.Delete(c)
	var ti *unix.TCPInfo
	var cc string
	_ = control(c.Conn, func(fd int) {
		ti, _ = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		cc, _ = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	err := c.Conn.Close()
	if st := t.srv.connDecision(c); st != nil {
		t.srv.sink.Add(t.srv.tcpConnRecord(c, st, ti, cc))
	}
	return err
}

// noteResponse records what a finished response on c tells the connection
// record: the HTTP version, and a delivery-rate sample.
func (c *Conn) noteResponse(protoMajor int) {
	t := c.tel
	if t == nil {
		return
	}
	if protoMajor == 1 {
		t.alpn.CompareAndSwap(protoUnknown, protoHTTP11)
	}
	_ = control(c.Conn, func(fd int) {
		if ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			t.sampleRate(ti.Delivery_rate)
		}
	})
}

func (t *connTelemetry) sampleRate(r uint64) {
	for {
		old := t.maxRate.Load()
		if r <= old || t.maxRate.CompareAndSwap(old, r) {
			return
		}
	}
}

// connDecision is the configuration c was served with: the handshake's
// decision, or with --static the table default for every connection. nil
// when the connection closed before its ClientHello (nothing was chosen).
func (s *Server) connDecision(c *Conn) *ConnState {
	if st := c.State(); st != nil {
		return st
	}
	if !s.cfg.Static {
		return nil
	}
	return s.staticState(remoteAddr(c.Conn))
}

// staticState is what --static serves a client: the table default, with
// probability 1 (until 2026-12-07 a response or page-load record under
// --static had prefix "unknown" and table version 0, which the manager
// refuses; found by review).
func (s *Server) staticState(addr netip.Addr) *ConnState {
	plan := s.plan.Load()
	st := &ConnState{Decision: Decision{Conf: plan.Default}, Addr: addr, Device: UnknownDevice, TableVersion: plan.Table.Version}
	st.Config, st.P = plan.Default.ID, 1
	return st
}

// tcpConnRecord is the "connection" record of a closed TCP connection; ti
// nil (TCP_INFO unreadable) leaves the transport fields out.
func (s *Server) tcpConnRecord(c *Conn, st *ConnState, ti *unix.TCPInfo, cc string) telemetry.Record {
	rec := s.stateRecord(st, "connection")
	rec.ALPN = alpnNames[c.tel.alpn.Load()]
	rec.DurationMs = telemetry.Ptr(float64(time.Since(c.Accepted).Microseconds()) / 1000)
	rec.CongestionControl = cc
	if ti == nil {
		return rec
	}
	c.tel.sampleRate(ti.Delivery_rate)
	us := func(v uint32) *float64 { return telemetry.Ptr(float64(v) / 1000) }
	i64 := func(v uint64) *int64 { return telemetry.Ptr(int64(min(v, 1<<63-1))) }
	rec.SrttMs, rec.MinRttMs = us(ti.Rtt), us(ti.Min_rtt)
	rec.BytesSent, rec.BytesAcked, rec.BytesRetrans = i64(ti.Bytes_sent), i64(ti.Bytes_acked), i64(ti.Bytes_retrans)
	rec.Retransmits, rec.Delivered = i64(uint64(ti.Total_retrans)), i64(uint64(ti.Delivered))
	rec.Cwnd, rec.MSS = i64(uint64(ti.Snd_cwnd)), i64(uint64(ti.Snd_mss))
	rec.MaxDeliveryRate = telemetry.Ptr(float64(c.tel.maxRate.Load()))
	return rec
}

// watchQUIC adds the "connection" record of a QUIC connection when it ends
// (one goroutine per connection; Close waits for them before the last
// flush).
func (s *Server) watchQUIC(qc *quicConn, c *quic.Conn) {
	s.connWG.Go(func() {
		<-c.Context().Done()
		st := qc.state.Load()
		if st == nil {
			return
		}
		s.sink.Add(s.quicConnRecord(qc, st, c.ConnectionStats()))
	})
}

// quicConnRecord maps quic-go's ConnectionStats onto the record: srtt,
// min RTT, bytes sent; bytes and packets declared lost (QUIC retransmits
// their frames in new packets) as bytes_retrans and retransmits. QUIC has
// no cwnd in segments, delivered count or delivery rate to report.
func (s *Server) quicConnRecord(qc *quicConn, st *ConnState, cs quic.ConnectionStats) telemetry.Record {
	rec := s.stateRecord(st, "connection")
	rec.ALPN = "h3"
	rec.DurationMs = telemetry.Ptr(float64(time.Since(qc.start).Microseconds()) / 1000)
	ms := func(d time.Duration) *float64 { return telemetry.Ptr(float64(d.Microseconds()) / 1000) }
	i64 := func(v uint64) *int64 { return telemetry.Ptr(int64(min(v, 1<<63-1))) }
	rec.SrttMs, rec.MinRttMs = ms(cs.SmoothedRTT), ms(cs.MinRTT)
	rec.BytesSent, rec.BytesRetrans, rec.Retransmits = i64(cs.BytesSent), i64(cs.BytesLost), i64(cs.PacketsLost)
	return rec
}

// connFrom is the TCP *Conn of a request (nil over QUIC).
func connFrom(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

var _ net.Conn = (*Conn)(nil)
