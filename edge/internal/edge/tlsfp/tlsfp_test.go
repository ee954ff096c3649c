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
