package edge

import (
	"context"
	"crypto/tls"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/tailor-project/tailor/edge/internal/delayproxy"
)

// oneWay is the delay the proxies add in each direction: RTT = 2*oneWay,
// large against loopback and scheduling noise, so durations count RTTs.
const oneWay = 15 * time.Millisecond

type delayed struct {
	b  []byte
	at time.Time
}

// tcpDelayProxy forwards 127.0.0.1:random to target with oneWay delay each
// way; closed at test end.
func tcpDelayProxy(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() { delayproxy.ServeTCP(ln, target, oneWay, &wg) })
	return ln.Addr().String()
}

// udpDelayProxy forwards datagrams between one client and target with
// oneWay delay each way.
func udpDelayProxy(t *testing.T, target string) string {
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	ta, err := net.ResolveUDPAddr("udp", target)
	must(t, err)
	back, err := net.DialUDP("udp", nil, ta)
	must(t, err)
	var client sync.Map // "addr" -> *net.UDPAddr (the latest client)
	up, down := make(chan delayed, 4096), make(chan delayed, 4096)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = front.Close(); _ = back.Close(); wg.Wait() })
	wg.Go(func() {
		defer close(up)
		for {
			buf := make([]byte, 2048)
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			client.Store("addr", from)
			up <- delayed{buf[:n], time.Now().Add(oneWay)}
		}
	})
	wg.Go(func() {
		defer close(down)
		for {
			buf := make([]byte, 2048)
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			down <- delayed{buf[:n], time.Now().Add(oneWay)}
		}
	})
	wg.Go(func() {
		for d := range up {
			time.Sleep(time.Until(d.at))
			_, _ = back.Write(d.b)
		}
	})
	wg.Go(func() {
		for d := range down {
			time.Sleep(time.Until(d.at))
			if a, ok := client.Load("addr"); ok {
				_, _ = front.WriteToUDP(d.b, a.(*net.UDPAddr))
			}
		}
	})
	return front.LocalAddr().String()
}

// tcpRounds is one fresh connection through the proxy: TLS handshake and
// first HTTP/2 response, each in RTTs (TCP connect not included).
func tcpRounds(t *testing.T, proxy string) (hs, first time.Duration) {
	c, err := net.Dial("tcp", proxy)
	must(t, err)
	defer c.Close()
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"h2", "http/1.1"}})
	t0 := time.Now()
	must(t, tc.Handshake())
	t1 := time.Now()
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	must(t, err)
	req, _ := http.NewRequest("GET", "https://localhost/index.html", nil)
	resp, err := cc.RoundTrip(req)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return t1.Sub(t0), time.Since(t1)
}

// quicRounds is one fresh QUIC connection through the proxy: handshake
// (Dial returns when it is complete) and first HTTP/3 response.
func quicRounds(t *testing.T, proxy string) (hs, first time.Duration) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	tr := &quic.Transport{Conn: udp}
	var t1 time.Time
	h3 := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			pa, _ := net.ResolveUDPAddr("udp", proxy)
			t0 := time.Now()
			c, err := tr.Dial(ctx, pa, tc, qc)
			t1 = time.Now()
			hs = t1.Sub(t0)
			return c, err
		}}
	defer func() { _ = h3.Close(); _ = tr.Close(); _ = udp.Close() }()
	resp, err := (&http.Client{Transport: h3, Timeout: 5 * time.Second}).Get("https://localhost/index.html")
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return hs, time.Since(t1)
}

// TestNoExtraRoundTrip counts round trips through a proxy that adds a
// 30 ms RTT: the TLS 1.3 and the QUIC handshake each take 1 RTT and the
// first HTTP/2 response 1 more, with per-connection selection exactly as
// with one static configuration (the same server with Static set). The
// first HTTP/3 response takes 2 RTT after the handshake in both modes:
// quic-go's client sends its request only after the server's first 1-RTT
// packets (HANDSHAKE_DONE, SETTINGS) arrive, and those ride on timers, so
// under load it is sometimes 3 (Chromium gets its first h3 byte 1 RTT after
// the request, see README); it is not compared between the modes.
func TestNoExtraRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("timing through a delay proxy; skipped with -short")
	}
	conf := map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(50), "quic.max_incoming_streams": int64(50)}
	table := tableJSON(t, 1, conf, route{prefix: "127.0.0.0/8", values: conf})
	rtt := 2 * oneWay
	rounds := func(d time.Duration) float64 { return float64(d) / float64(rtt) }
	want := map[string]float64{"tls": 1, "h2 first": 1, "quic": 1, "h3 first": 2}
	got := map[bool]map[string]float64{}
	for _, static := range []bool{false, true} {
		name := map[bool]string{false: "selection", true: "static"}[static]
		s, addr := startServer(t, Config{QUIC: true, Static: static}, table)
		var selected atomic.Int64
		s.OnDecision = func(*Conn, *ConnState) { selected.Add(1) }
		s.SetOnQUICDecision(func(*quic.Conn, *ConnState) { selected.Add(1) })
		tp, qp := tcpDelayProxy(t, addr), udpDelayProxy(t, addr)
		best := map[string]time.Duration{}
		keep := func(k string, d time.Duration) {
			if v, ok := best[k]; !ok || d < v {
				best[k] = d
			}
		}
		for range 5 { // the fastest of 5 discards scheduling noise
			hs, first := tcpRounds(t, tp)
			keep("tls", hs)
			keep("h2 first", first)
			hs, first = quicRounds(t, qp)
			keep("quic", hs)
			keep("h3 first", first)
		}
		if n := map[bool]int64{false: 10, true: 0}[static]; selected.Load() != n { // 5 TCP + 5 QUIC
			t.Errorf("%s: %d selections (TCP + QUIC), want %d", name, selected.Load(), n)
		}
		got[static] = map[string]float64{}
		for k, w := range want {
			r := rounds(best[k])
			got[static][k] = r
			t.Logf("%-9s %-8s %6.1f ms = %.2f RTT", name, k, float64(best[k].Microseconds())/1000, r)
			if k == "h3 first" { // 2, or 3 when quic-go's post-handshake packets miss the RTT boundary
				if r < 1.6 || r > 3.45 {
					t.Errorf("%s %s: %.2f RTT, want 2 (3 tolerated)", name, k, r)
				}
				continue
			}
			if math.Round(r) != w || r > w+0.4 {
				t.Errorf("%s %s: %.2f RTT, want %.0f", name, k, r, w)
			}
		}
	}
	for _, k := range []string{"tls", "h2 first", "quic"} {
		if d := got[false][k] - got[true][k]; d > 0.25 {
			t.Errorf("%s: selection is %.2f RTT slower than static", k, d)
		}
	}
}
