package tlsfp

// The fingerprint code before it was rewritten for speed, kept as the
// reference the fast version must match byte for byte.

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

// extension numbers ref_JA4 treats specially.
const (
	ref_extSNI  = 0x0000
	ref_extALPN = 0x0010
)

// ref_isGREASE reports RFC 8701 values (0x?a?a), which fingerprints ignore.
func ref_isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

func ref_noGREASE(vs []uint16) []uint16 {
	out := make([]uint16, 0, len(vs))
	for _, v := range vs {
		if !ref_isGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// ref_legacyVersion approximates the ClientHello legacy_version: TLS 1.3
// clients send 0x0303 there, older ones their highest version.
func ref_legacyVersion(h *tls.ClientHelloInfo) uint16 {
	v := uint16(0)
	for _, s := range ref_noGREASE(h.SupportedVersions) {
		v = max(v, s)
	}
	return min(v, tls.VersionTLS12)
}

func ref_joinDec[T uint8 | uint16 | tls.CurveID | tls.SignatureScheme](vs []T) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, "-")
}

// ref_JA3String is "version,ciphers,extensions,curves,point_formats" in
// decimal (the ref_JA3 input), GREASE removed.
func ref_JA3String(h *tls.ClientHelloInfo) string {
	curves := make([]uint16, len(h.SupportedCurves))
	for i, c := range h.SupportedCurves {
		curves[i] = uint16(c)
	}
	return fmt.Sprintf("%d,%s,%s,%s,%s", ref_legacyVersion(h), ref_joinDec(ref_noGREASE(h.CipherSuites)),
		ref_joinDec(ref_noGREASE(h.Extensions)), ref_joinDec(ref_noGREASE(curves)), ref_joinDec(h.SupportedPoints))
}

// ref_JA3 is the MD5 of ref_JA3String, as hex.
func ref_JA3(h *tls.ClientHelloInfo) string {
	sum := md5.Sum([]byte(ref_JA3String(h)))
	return hex.EncodeToString(sum[:])
}

// ref_JA4 is the ref_JA4 TLS client fingerprint "a_b_c": a = t<ver><sni d|i><#ciphers><#exts><alpn>,
// b = sha256 of the ref_sorted cipher list, c = sha256 of the ref_sorted extensions
// (without SNI and ALPN) and the signature algorithms, both truncated to 12 hex.
func ref_JA4(h *tls.ClientHelloInfo) string { return ref_ja4(h, 't') }

// ref_JA4QUIC is ref_JA4 for a ClientHello carried in QUIC (protocol letter "q").
func ref_JA4QUIC(h *tls.ClientHelloInfo) string { return ref_ja4(h, 'q') }

func ref_ja4(h *tls.ClientHelloInfo, proto byte) string {
	ciphers, exts := ref_noGREASE(h.CipherSuites), ref_noGREASE(h.Extensions)
	a := fmt.Sprintf("%c%s%s%02d%02d%s", proto, ref_ja4Version(h), ref_ja4SNI(h), min(len(ciphers), 99), min(len(exts), 99), ref_ja4ALPN(h))
	return a + "_" + ref_hash12(ref_hexList(ref_sorted(ciphers))) + "_" + ref_hash12(ref_ja4Extensions(h, exts))
}

func ref_ja4Version(h *tls.ClientHelloInfo) string {
	v := uint16(0)
	for _, s := range ref_noGREASE(h.SupportedVersions) {
		v = max(v, s)
	}
	names := map[uint16]string{tls.VersionTLS13: "13", tls.VersionTLS12: "12", tls.VersionTLS11: "11", tls.VersionTLS10: "10"}
	if n, ok := names[v]; ok {
		return n
	}
	return "00"
}

func ref_ja4SNI(h *tls.ClientHelloInfo) string {
	if h.ServerName != "" {
		return "d"
	}
	return "i"
}

func ref_ja4ALPN(h *tls.ClientHelloInfo) string {
	if len(h.SupportedProtos) == 0 || h.SupportedProtos[0] == "" {
		return "00"
	}
	p := h.SupportedProtos[0]
	return string(p[0]) + string(p[len(p)-1])
}

func ref_ja4Extensions(h *tls.ClientHelloInfo, exts []uint16) string {
	kept := slices.DeleteFunc(slices.Clone(exts), func(e uint16) bool { return e == ref_extSNI || e == ref_extALPN })
	s := ref_hexList(ref_sorted(kept))
	sigs := make([]uint16, len(h.SignatureSchemes))
	for i, v := range h.SignatureSchemes {
		sigs[i] = uint16(v)
	}
	if len(sigs) > 0 {
		s += "_" + ref_hexList(sigs)
	}
	return s
}

func ref_sorted(vs []uint16) []uint16 {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}

func ref_hexList(vs []uint16) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%04x", v)
	}
	return strings.Join(parts, ",")
}

func ref_hash12(s string) string {
	if s == "" {
		return "000000000000"
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}
