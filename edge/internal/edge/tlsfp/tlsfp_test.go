package tlsfp

import (
	"crypto/tls"
	"testing"
)

func hello() *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{
		CipherSuites:      []uint16{0x1a1a, 0x1301, 0x1302, 0xc02b},
		Extensions:        []uint16{0x0a0a, 0x0000, 0x0010, 0x000d, 0x002b},
		SupportedCurves:   []tls.CurveID{0x2a2a, tls.X25519, tls.CurveP256},
		SupportedPoints:   []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{0x0403, 0x0804},
		SupportedVersions: []uint16{0x3a3a, tls.VersionTLS13, tls.VersionTLS12},
		SupportedProtos:   []string{"h2", "http/1.1"},
		ServerName:        "example.com",
	}
}

func TestFingerprints(t *testing.T) {
	h := hello()
	cases := []struct{ name, got, want string }{
		{"ja3 string", JA3String(h), "771,4865-4866-49195,0-16-13-43,29-23,0"},
		{"ja4 prefix", JA4(h)[:10], "t13d0304h2"},
		{"ja4 quic prefix", JA4QUIC(h)[:10], "q13d0304h2"},
		{"ja4 quic hashes equal tcp", JA4QUIC(h)[1:], JA4(h)[1:]},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	h2 := hello()
	h2.ServerName, h2.SupportedProtos = "", nil
	if got := JA4(h2)[:10]; got != "t13i030400" {
		t.Errorf("ja4 without sni/alpn prefix = %q", got)
	}
	if len(JA3(h)) != 32 || JA3(h) != JA3(h2) { // JA3 ignores SNI and ALPN values
		t.Errorf("ja3 %q vs %q", JA3(h), JA3(h2))
	}
}

// TestMatchesReference: the allocation-free version gives exactly the
// strings of the straightforward one on varied ClientHellos.
func TestMatchesReference(t *testing.T) {
	many := make([]uint16, 80)
	for i := range many {
		many[i] = uint16(0x1300 + i*7)
	}
	chrome := &tls.ClientHelloInfo{
		CipherSuites:    []uint16{0x6a6a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		Extensions:      []uint16{0x3a3a, 0x0017, 0x0000, 0xff01, 0x000a, 0x000b, 0x0023, 0x0010, 0x0005, 0x000d, 0x0012, 0x0033, 0x002d, 0x002b, 0x001b, 0x4469, 0xfe0d, 0x5a5a},
		SupportedCurves: []tls.CurveID{0x8a8a, 0x11ec, tls.X25519, tls.CurveP256, tls.CurveP384}, SupportedPoints: []uint8{0},
		SignatureSchemes:  []tls.SignatureScheme{0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601},
		SupportedVersions: []uint16{0x2a2a, tls.VersionTLS13, tls.VersionTLS12}, SupportedProtos: []string{"h2", "http/1.1"}, ServerName: "www.example.com",
	}
	hellos := []*tls.ClientHelloInfo{hello(), chrome, {}, {CipherSuites: many, Extensions: many, SupportedProtos: []string{"\xffx\x80"}},
		{SupportedVersions: []uint16{tls.VersionTLS10}, Extensions: []uint16{0, 16}, SignatureSchemes: []tls.SignatureScheme{0x0403}},
		{SupportedVersions: []uint16{0x7f00}, CipherSuites: []uint16{0x0a0a}}}
	for i, h := range hellos {
		pairs := [][2]string{{JA3String(h), ref_JA3String(h)}, {JA3(h), ref_JA3(h)}, {JA4(h), ref_JA4(h)}, {JA4QUIC(h), ref_JA4QUIC(h)}}
		for _, p := range pairs {
			if p[0] != p[1] {
				t.Errorf("hello %d: %q, reference %q", i, p[0], p[1])
			}
		}
	}
}

func BenchmarkFingerprints(b *testing.B) {
	h := hello()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = JA3(h), JA4(h)
	}
}
