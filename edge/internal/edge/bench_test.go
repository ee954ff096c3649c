package edge

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
		_ = classify(hello, plan, nil, true, nil)
	}
}

// chromeHello is a Chromium-like ClientHello (16 ciphers, 18 extensions
// with GREASE), the usual size of what classify fingerprints.
func chromeHello(c net.Conn) *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{Conn: c, ServerName: "www.site-7.test",
		CipherSuites:    []uint16{0x6a6a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		Extensions:      []uint16{0x3a3a, 0x0017, 0x0000, 0xff01, 0x000a, 0x000b, 0x0023, 0x0010, 0x0005, 0x000d, 0x0012, 0x0033, 0x002d, 0x002b, 0x001b, 0x4469, 0xfe0d, 0x5a5a},
		SupportedCurves: []tls.CurveID{0x8a8a, 0x11ec, tls.X25519, tls.CurveP256, tls.CurveP384}, SupportedPoints: []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601},
		SupportedVersions: []uint16{0x2a2a, tls.VersionTLS13, tls.VersionTLS12}, SupportedProtos: []string{"h2", "http/1.1"}}
}

// bigTable has n rules over the given prefix lengths (with SNI and device
// rules mixed in) in 10/8, so resolution of 10.1.2.3 probes every length.
func bigTable(b *testing.B, n int, lengths []int) *rules.Table {
	reg, _ := knobs.Default()
	routes := make([]route, 0, n)
	for i := range n {
		bits := lengths[i%len(lengths)]
		a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(i * 7)})
		p, _ := a.Prefix(bits)
		r := route{prefix: p.String(), values: map[string]any{"http.version": "2", "http2.max_concurrent_streams": int64(1 + i%1000)}}
		switch i % 3 {
		case 1:
			r.sni = fmt.Sprintf("www.site-%d.test", i%50)
		case 2:
			r.device = []string{"desktop", "android", "ios"}[i%3]
		}
		routes = append(routes, r)
	}
	// drop duplicate (prefix, sni, device) keys, which tables may not have
	seen := map[string]bool{}
	uniq := routes[:0]
	for _, r := range routes {
		k := r.prefix + "|" + r.sni + "|" + r.device
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, r)
		}
	}
	table, err := rules.Parse(tableJSON(b, 1, h11, uniq...), reg)
	if err != nil {
		b.Fatal(err)
	}
	return table
}

// BenchmarkDecideLatency times every decision separately (fingerprints,
// device lookup, LPM over a 10 000-rule table, sampling) and reports
// percentiles in ns: over all samples, and over the samples during which
// the thread kept its CPU (p99-on-cpu-ns, the decision's own cost; the
// share of switched-out samples is switched-%). The clock read adds about
// 30 ns to each sample.
// "3-lengths" has /8, /16 and /24 rules (a manager's per-/24 table);
// "25-lengths" has every length /8../32, the resolver's worst case (one
// hash probe per length).
func BenchmarkDecideLatency(b *testing.B) {
	for _, c := range []struct {
		name    string
		lengths []int
	}{{"3-lengths", []int{8, 16, 24}}, {"25-lengths", []int{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}}} {
		b.Run(c.name, func(b *testing.B) { decideLatency(b, bigTable(b, 10000, c.lengths)) })
	}
}

func decideLatency(b *testing.B, table *rules.Table) {
	reg, _ := knobs.Default()
	cert, _ := SelfSigned()
	plan := provision(table, reg, &tls.Config{Certificates: []tls.Certificate{cert}}, &http.Server{})
	devices, err := ParseDeviceMap([]byte(`{"schema":"tailor.device-map/v1","ja4_a":{"t13d1517h2":"desktop"}}`))
	if err != nil {
		b.Fatal(err)
	}
	hello := chromeHello(fakeConn{})
	// Every sample is timed on one OS thread between two getrusage calls:
	// a sample during which the kernel switched the thread out (this
	// machine is shared) is reported in "all" but not in "on-cpu".
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all := make([]int64, 0, 1<<20)
	onCPU := make([]int64, 0, 1<<20)
	var before, after unix.Rusage
	b.ReportAllocs()
	for b.Loop() {
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &before)
		t0 := time.Now()
		st := classify(hello, plan, devices, true, nil) // with the JA3: an upper bound of the served path
		d := time.Since(t0).Nanoseconds()
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &after)
		if st.Conf == nil {
			b.Fatal("no config")
		}
		if len(all) < cap(all) {
			all = append(all, d)
			if after.Nivcsw == before.Nivcsw && after.Nvcsw == before.Nvcsw {
				onCPU = append(onCPU, d)
			}
		}
	}
	q := func(s []int64, p float64) float64 {
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1))])
	}
	b.ReportMetric(q(all, 0.5), "p50-ns")
	b.ReportMetric(q(all, 0.99), "p99-ns")
	b.ReportMetric(q(onCPU, 0.99), "p99-on-cpu-ns")
	b.ReportMetric(q(onCPU, 0.999), "p99.9-on-cpu-ns")
	b.ReportMetric(100*float64(len(all)-len(onCPU))/float64(len(all)), "switched-%")
	b.ReportMetric(float64(len(table.Rules)), "rules")
}
