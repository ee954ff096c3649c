package edge

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// fakeConn gives classify a remote address without a socket.
type fakeConn struct{ net.Conn }

func (fakeConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4000} }

// BenchmarkDecide is the per-connection decision: fingerprint, LPM
// resolution, sampling (what GetConfigForClient adds to a handshake).
func BenchmarkDecide(b *testing.B) {
	reg, _ := knobs.Default()
	doc := tableJSON(b, 1, h11, route{prefix: "10.0.0.0/8", values: h2}, route{prefix: "10.1.0.0/16", sni: "a.test", values: h11})
	table, err := rules.Parse(doc, reg)
	if err != nil {
		b.Fatal(err)
	}
	cert, _ := SelfSigned()
	plan := provision(table, reg, &tls.Config{Certificates: []tls.Certificate{cert}}, &http.Server{})
	hello := &tls.ClientHelloInfo{Conn: fakeConn{}, ServerName: "a.test", CipherSuites: []uint16{0x1301, 0x1302, 0xc02b},
		Extensions: []uint16{0, 16, 13, 43, 51}, SupportedVersions: []uint16{0x0304, 0x0303}, SupportedProtos: []string{"h2"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = classify(hello, plan)
	}
}
