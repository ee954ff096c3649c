package edge

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// paramsRecorder keeps the transport parameters the peer (server) sent,
// as quic-go's client saw them in the handshake.
type paramsRecorder struct {
	mu        sync.Mutex
	seen      []qlog.ParametersSet
	firstSize int
}

func (p *paramsRecorder) AddProducer() qlogwriter.Recorder { return p }
func (p *paramsRecorder) Close() error                     { return nil }
func (p *paramsRecorder) RecordEvent(ev qlogwriter.Event) {
	if ps, ok := ev.(qlog.ParametersSet); ok && ps.Initiator == qlog.InitiatorRemote {
		p.mu.Lock()
		p.seen = append(p.seen, ps)
		p.mu.Unlock()
	}
}

func (p *paramsRecorder) server(t *testing.T) qlog.ParametersSet {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 1 {
		t.Fatalf("%d server transport-parameter sets seen, want 1", len(p.seen))
	}
	return p.seen[0]
}

// h3Get fetches path over HTTP/3 with quic-go's client from source address
// src (any 127/8 address works on loopback) and returns what the client
// saw of the server's transport parameters.
func h3Get(t *testing.T, addr, src, sni, path string) (*http.Response, []byte, qlog.ParametersSet, int) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	must(t, err)
	rec := &paramsRecorder{}
	tr := &quic.Transport{Conn: &firstDatagram{PacketConn: udp}}
	h3 := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: sni},
		QUICConfig:      &quic.Config{Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return rec }},
		Dial: func(ctx context.Context, a string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp", a)
			if err != nil {
				return nil, err
			}
			return tr.Dial(ctx, ua, tc, qc)
		},
	}
	defer func() { _ = h3.Close(); _ = tr.Close(); _ = udp.Close() }()
	client := &http.Client{Transport: h3, Timeout: 5 * time.Second}
	resp, err := client.Get("https://" + addr + path)
	if err != nil {
		t.Fatalf("h3 GET from %s (sni %s): %v", src, sni, err)
	}
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	resp.Body.Close()
	rec.firstSize = int(tr.Conn.(*firstDatagram).size.Load())
	return resp, body, rec.server(t), rec.firstSize
}

// firstDatagram notes the largest handshake datagram the client receives
// (one that starts with a long-header packet: Initial or Handshake): the
// server's padded Initial, as large as its initial packet size. Path MTU
// probes are short-header (1-RTT) packets and may arrive early on loopback,
// so counting the first few datagrams of any kind was flaky (a 1366-byte
// probe among the first three).
type firstDatagram struct {
	net.PacketConn
	size atomic.Int64
}

func (f *firstDatagram) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := f.PacketConn.ReadFrom(b)
	if err == nil && n > 0 && b[0]&0x80 != 0 && int64(n) > f.size.Load() {
		f.size.Store(int64(n))
	}
	return n, a, err
}

// TestQUICTransportParamsFollowTable: quic-go's own HTTP/3 client fetches a
// file; the transport parameters it receives follow the table per client
// prefix (two source addresses), and TCP responses carry Alt-Svc.
func TestQUICTransportParamsFollowTable(t *testing.T) {
	small := map[string]any{"quic.max_idle_timeout_ms": int64(5000), "quic.initial_stream_receive_window": int64(65536),
		"quic.initial_connection_receive_window": int64(131072), "quic.max_incoming_streams": int64(7), "quic.initial_packet_size": int64(1350)}
	big := map[string]any{"http.version": "2", "quic.max_idle_timeout_ms": int64(120000), "quic.initial_stream_receive_window": int64(8 << 20),
		"quic.initial_connection_receive_window": int64(16 << 20), "quic.max_incoming_streams": int64(250)}
	sniOnly := map[string]any{"quic.max_incoming_streams": int64(3)}
	out := &lockedBuffer{}
	s, addr := startServer(t, Config{QUIC: true, Telemetry: "-", TelemetryOut: out}, tableJSON(t, 4, h11,
		route{prefix: "127.0.0.2/32", values: small}, route{prefix: "127.0.0.3/32", values: big},
		route{prefix: "127.0.0.0/8", sni: "sni.test", values: sniOnly}))
	decided := make(chan *ConnState, 8)
	s.SetOnQUICDecision(func(_ *quic.Conn, st *ConnState) { decided <- st })

	cases := []struct {
		name, src, sni                      string
		idle                                time.Duration
		streamWin, connWin, streams, packet int64
		wantConfig                          map[string]any
	}{
		{"127.0.0.2/32 -> small", "127.0.0.2", "localhost", 5 * time.Second, 65536, 131072, 7, 1350, small},
		{"127.0.0.3/32 -> big", "127.0.0.3", "localhost", 120 * time.Second, 8 << 20, 16 << 20, 250, 1280, big},
		{"no rule -> defaults", "127.0.0.4", "localhost", 30 * time.Second, 524288, 786432, 100, 1280, h11},
		// The transport parameters are fixed on the first Initial packet,
		// before the ClientHello is parsed: an SNI rule cannot choose them.
		{"sni rule not visible to QUIC", "127.0.0.5", "sni.test", 30 * time.Second, 524288, 786432, 100, 1280, h11},
	}
	for _, c := range cases {
		resp, body, tp, first := h3Get(t, addr, c.src, c.sni, "/data.bin")
		if int64(first) != c.packet {
			t.Errorf("%s: server's largest handshake datagram %d bytes, want the initial packet size %d", c.name, first, c.packet)
		}
		if resp.Proto != "HTTP/3.0" || len(body) != 100000 {
			t.Errorf("%s: %s, %d bytes", c.name, resp.Proto, len(body))
		}
		if tp.MaxIdleTimeout != c.idle || int64(tp.InitialMaxStreamDataBidiRemote) != c.streamWin ||
			int64(tp.InitialMaxData) != c.connWin || tp.InitialMaxStreamsBidi != c.streams {
			t.Errorf("%s: server transport parameters idle=%v stream_data_bidi_remote=%d max_data=%d streams_bidi=%d, want %v %d %d %d",
				c.name, tp.MaxIdleTimeout, tp.InitialMaxStreamDataBidiRemote, tp.InitialMaxData, tp.InitialMaxStreamsBidi,
				c.idle, c.streamWin, c.connWin, c.streams)
		}
		st := <-decided
		if st.Config != configID(t, c.wantConfig) || st.SNI != c.sni || !strings.HasPrefix(st.JA4, "q13d") || st.HandshakeRTT <= 0 {
			t.Errorf("%s: decision %+v sni=%q ja4=%q rtt=%v", c.name, st.Decision.Decision, st.SNI, st.JA4, st.HandshakeRTT)
		}
	}

	resp, _ := get(t, addr, "localhost", "/index.html")
	_, port, _ := net.SplitHostPort(addr)
	if got, want := resp.Header.Get("Alt-Svc"), `h3=":`+port+`"; ma=86400`; got != want {
		t.Errorf("TCP Alt-Svc %q, want %q", got, want)
	}

	must(t, s.sink.Flush(context.Background()))
	var h3recs int
	for _, r := range readBatches(t, out.b.Bytes()) {
		if r.ALPN != "h3" {
			continue
		}
		h3recs++
		if r.HandshakeRttMs == nil || *r.HandshakeRttMs <= 0 || !strings.HasPrefix(r.TLSFingerprint, "q13") || r.TableVersion != 4 {
			t.Errorf("h3 record %+v", r)
		}
	}
	if h3recs != len(cases) {
		t.Errorf("%d h3 response records, want %d", h3recs, len(cases))
	}
}
