// Package tlsfp computes JA3- and JA4-style fingerprints from what Go's
// crypto/tls exposes of a ClientHello (tls.ClientHelloInfo). Go does not
// expose the legacy record version or the raw extension bytes, so both
// fingerprints are close approximations (see JA3 and JA4 below).
package tlsfp

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// extension numbers JA4 treats specially.
const (
	extSNI  = 0x0000
	extALPN = 0x0010
)

// isGREASE reports RFC 8701 values (0x?a?a), which fingerprints ignore.
func isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

func noGREASE(vs []uint16) []uint16 {
	out := make([]uint16, 0, len(vs))
	for _, v := range vs {
		if !isGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// legacyVersion approximates the ClientHello legacy_version: TLS 1.3
// clients send 0x0303 there, older ones their highest version.
func legacyVersion(h *tls.ClientHelloInfo) uint16 {
	v := uint16(0)
	for _, s := range noGREASE(h.SupportedVersions) {
		v = max(v, s)
	}
	return min(v, tls.VersionTLS12)
}

func joinDec[T uint8 | uint16 | tls.CurveID | tls.SignatureScheme](vs []T) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, "-")
}

// JA3String is "version,ciphers,extensions,curves,point_formats" in
// decimal (the JA3 input), GREASE removed.
func JA3String(h *tls.ClientHelloInfo) string {
	curves := make([]uint16, len(h.SupportedCurves))
	for i, c := range h.SupportedCurves {
		curves[i] = uint16(c)
	}
	return fmt.Sprintf("%d,%s,%s,%s,%s", legacyVersion(h), joinDec(noGREASE(h.CipherSuites)),
		joinDec(noGREASE(h.Extensions)), joinDec(noGREASE(curves)), joinDec(h.SupportedPoints))
}

// JA3 is the MD5 of JA3String, as hex.
func JA3(h *tls.ClientHelloInfo) string {
	sum := md5.Sum([]byte(JA3String(h)))
	return hex.EncodeToString(sum[:])
}

// JA4 is the JA4 TLS client fingerprint "a_b_c": a = t<ver><sni d|i><#ciphers><#exts><alpn>,
// b = sha256 of the sorted cipher list, c = sha256 of the sorted extensions
// (without SNI and ALPN) and the signature algorithms, both truncated to 12 hex.
func JA4(h *tls.ClientHelloInfo) string {
	ciphers, exts := noGREASE(h.CipherSuites), noGREASE(h.Extensions)
	a := fmt.Sprintf("t%s%s%02d%02d%s", ja4Version(h), ja4SNI(h), min(len(ciphers), 99), min(len(exts), 99), ja4ALPN(h))
	return a + "_" + hash12(hexList(sorted(ciphers))) + "_" + hash12(ja4Extensions(h, exts))
}

func ja4Version(h *tls.ClientHelloInfo) string {
	v := uint16(0)
	for _, s := range noGREASE(h.SupportedVersions) {
		v = max(v, s)
	}
	names := map[uint16]string{tls.VersionTLS13: "13", tls.VersionTLS12: "12", tls.VersionTLS11: "11", tls.VersionTLS10: "10"}
	if n, ok := names[v]; ok {
		return n
	}
	return "00"
}

func ja4SNI(h *tls.ClientHelloInfo) string {
	if h.ServerName != "" {
		return "d"
	}
	return "i"
}

func ja4ALPN(h *tls.ClientHelloInfo) string {
	if len(h.SupportedProtos) == 0 || h.SupportedProtos[0] == "" {
		return "00"
	}
	p := h.SupportedProtos[0]
	return string(p[0]) + string(p[len(p)-1])
}

func ja4Extensions(h *tls.ClientHelloInfo, exts []uint16) string {
	kept := slices.DeleteFunc(slices.Clone(exts), func(e uint16) bool { return e == extSNI || e == extALPN })
	s := hexList(sorted(kept))
	sigs := make([]uint16, len(h.SignatureSchemes))
	for i, v := range h.SignatureSchemes {
		sigs[i] = uint16(v)
	}
	if len(sigs) > 0 {
		s += "_" + hexList(sigs)
	}
	return s
}

func sorted(vs []uint16) []uint16 {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}

func hexList(vs []uint16) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%04x", v)
	}
	return strings.Join(parts, ",")
}

func hash12(s string) string {
	if s == "" {
		return "000000000000"
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}
