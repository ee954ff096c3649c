package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

var (
	h11 = map[string]any{"http.version": "1.1"}
	h2  = map[string]any{"http.version": "2"}
)

// TestALPNFollowsTable: the HTTP version a real client gets follows the
// table per prefix and SNI, and follows a reloaded table.
func TestALPNFollowsTable(t *testing.T) {
	s, addr := startServer(t, Config{}, tableJSON(t, 1, h2, route{prefix: "127.0.0.0/8", values: h11},
		route{prefix: "127.0.0.0/8", sni: "fast.test", values: h2}))
	steps := []struct {
		name, sni, wantProto string
		table                []byte
	}{
		{"prefix forces 1.1", "localhost", "HTTP/1.1", nil},
		{"sni rule beats prefix rule", "fast.test", "HTTP/2.0", nil},
		{"reloaded table forces h2", "localhost", "HTTP/2.0", tableJSON(t, 2, h11, route{prefix: "127.0.0.0/8", values: h2})},
		{"unknown prefix gets default 1.1", "localhost", "HTTP/1.1", tableJSON(t, 3, h11, route{prefix: "10.0.0.0/8", values: h2})},
	}
	for _, st := range steps {
		if st.table != nil {
			must(t, os.WriteFile(s.cfg.Table, st.table, 0o644))
			must(t, s.Reload(context.Background()))
		}
		resp, body := get(t, addr, st.sni, "/data.bin")
		if resp.Proto != st.wantProto || len(body) != 100000 {
			t.Errorf("%s: proto %s (%d bytes), want %s", st.name, resp.Proto, len(body), st.wantProto)
		}
		if want := map[bool]string{true: "h2", false: "http/1.1"}[st.wantProto == "HTTP/2.0"]; resp.TLS.NegotiatedProtocol != want {
			t.Errorf("%s: ALPN %q, want %q", st.name, resp.TLS.NegotiatedProtocol, want)
		}
	}
}

// TestH2SettingsPerConnection reads the server's first SETTINGS frame with
// a raw framer: two configurations, two different frames.
func TestH2SettingsPerConnection(t *testing.T) {
	small := map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(7), "http2.initial_window_size": int64(65535),
		"http2.max_frame_size": int64(32768), "http2.header_table_size": int64(8192), "http2.max_header_list_size": int64(10000)}
	big := map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(250), "http2.initial_window_size": int64(4 << 20)}
	_, addr := startServer(t, Config{}, tableJSON(t, 1, h2, route{prefix: "127.0.0.0/8", sni: "small.test", values: small},
		route{prefix: "127.0.0.0/8", sni: "big.test", values: big}))
	cases := []struct {
		sni  string
		want map[http2.SettingID]uint32
	}{
		{"small.test", map[http2.SettingID]uint32{http2.SettingMaxConcurrentStreams: 7, http2.SettingInitialWindowSize: 65535,
			http2.SettingMaxFrameSize: 32768, http2.SettingHeaderTableSize: 8192, http2.SettingMaxHeaderListSize: 10000}},
		{"big.test", map[http2.SettingID]uint32{http2.SettingMaxConcurrentStreams: 250, http2.SettingInitialWindowSize: 4 << 20,
			http2.SettingMaxFrameSize: 16384, http2.SettingHeaderTableSize: 4096, http2.SettingMaxHeaderListSize: 16384}},
		{"other.test", map[http2.SettingID]uint32{http2.SettingMaxConcurrentStreams: 100, http2.SettingInitialWindowSize: 65535}},
	}
	for _, c := range cases {
		got := serverSettings(t, addr, c.sni)
		for id, v := range c.want {
			if got[id] != v {
				t.Errorf("%s: %v = %d, want %d (all: %v)", c.sni, id, got[id], v, got)
			}
		}
	}
}

func serverSettings(t *testing.T, addr, sni string) map[http2.SettingID]uint32 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: sni, NextProtos: []string{"h2"}})
	must(t, err)
	defer c.Close()
	must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("%s: ALPN %q", sni, p)
	}
	_, err = c.Write([]byte(http2.ClientPreface))
	must(t, err)
	fr := http2.NewFramer(c, c)
	must(t, fr.WriteSettings())
	for {
		f, err := fr.ReadFrame()
		must(t, err)
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			got := map[http2.SettingID]uint32{}
			must(t, sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil }))
			return got
		}
	}
}

// TestSocketKnobs reads the options back from the server's socket.
func TestSocketKnobs(t *testing.T) {
	tuned := map[string]any{"tcp.congestion_control": "reno", "tcp.sndbuf_bytes": int64(262144), "tcp.notsent_lowat_bytes": int64(16384),
		"tcp.rcvbuf_bytes": int64(98304)}
	s, addr := startServer(t, Config{ApplySocket: true}, tableJSON(t, 1, h11, route{prefix: "127.0.0.0/8", sni: "tuned.test", values: tuned}))
	type seen struct {
		cc                    string
		sndbuf, lowat, rcvbuf int
	}
	got := make(chan seen, 4)
	s.OnDecision = func(c *Conn, _ *ConnState) {
		raw, err := c.Conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Error(err) // not Fatal: this runs on the server's goroutine
			return
		}
		var g seen
		_ = raw.Control(func(fd uintptr) {
			g.cc, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
			g.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
			g.lowat, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
			g.rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		})
		got <- g
	}
	cases := []struct {
		sni  string
		want seen
	}{
		{"tuned.test", seen{"reno", 2 * 262144, 16384, 2 * 98304}}, // the kernel doubles SO_SNDBUF and SO_RCVBUF
		{"plain.test", seen{"cubic", -1, -1, -1}},                  // -1: not checked (kernel defaults)
	}
	for _, c := range cases {
		get(t, addr, c.sni, "/index.html")
		g := <-got
		if g.cc != c.want.cc || (c.want.sndbuf >= 0 && g.sndbuf != c.want.sndbuf) || (c.want.lowat >= 0 && g.lowat != c.want.lowat) ||
			(c.want.rcvbuf >= 0 && g.rcvbuf != c.want.rcvbuf) {
			t.Errorf("%s: got %+v, want %+v", c.sni, g, c.want)
		}
	}
	if f := s.Socket.Failed.Load(); f != 0 {
		t.Errorf("%d setsockopt failures: %v", f, s.Socket.LastErr.Load())
	}
}

// TestInvalidTableKeepsLastGood: a rejected table names the field and the
// old one stays in force.
func TestInvalidTableKeepsLastGood(t *testing.T) {
	s, addr := startServer(t, Config{}, tableJSON(t, 5, h11, route{prefix: "127.0.0.0/8", values: h2}))
	bad := []struct{ name, doc, field string }{
		{"not json", `{`, "(root)"},
		{"bad probability", `{"schema":"tailor.decision-table/v1","version":6,"generated_at":1,"default":"` + configID(t, h11) + `","configs":{"` +
			configID(t, h11) + `":{"http.version":"1.1"}},"groups":[{"id":"g","choices":[{"config":"` + configID(t, h11) + `","p":0.5}]}],"rules":[]}`,
			"groups[0].choices"},
	}
	for _, b := range bad {
		must(t, os.WriteFile(s.cfg.Table, []byte(b.doc), 0o644))
		err := s.Reload(context.Background())
		var fe *rules.FieldError
		if !errors.Is(err, ErrTable) || !errors.As(err, &fe) || fe.Field != b.field {
			t.Errorf("%s: err %v, want a FieldError on %s", b.name, err, b.field)
		}
		if v := s.Plan().Table.Version; v != 5 {
			t.Errorf("%s: version %d in force, want 5", b.name, v)
		}
	}
	if resp, _ := get(t, addr, "localhost", "/index.html"); resp.Proto != "HTTP/2.0" {
		t.Errorf("after rejected tables proto %s, want HTTP/2.0 from the last good table", resp.Proto)
	}
}
