// Package tlsfp computes JA3- and JA4-style fingerprints from what Go's
// crypto/tls exposes of a ClientHello (tls.ClientHelloInfo). Go does not
// expose the legacy record version or the raw extension bytes, so both
// fingerprints are close approximations (see JA3 and JA4 below).
//
// Both run inside every TLS handshake, so they build their inputs in
// stack buffers and allocate only the returned string.
package tlsfp

import (
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
	"strconv"
	"unicode/utf8"
)

// extension numbers JA4 treats specially.
const (
	extSNI  = 0x0000
	extALPN = 0x0010
)

// isGREASE reports RFC 8701 values (0x?a?a), which fingerprints ignore.
func isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

// legacyVersion approximates the ClientHello legacy_version: TLS 1.3
// clients send 0x0303 there, older ones their highest version.
func legacyVersion(h *tls.ClientHelloInfo) uint16 {
	return min(maxVersion(h), tls.VersionTLS12)
}

func maxVersion(h *tls.ClientHelloInfo) uint16 {
	v := uint16(0)
	for _, s := range h.SupportedVersions {
		if !isGREASE(s) {
			v = max(v, s)
		}
	}
	return v
}

// appendDec appends vs in decimal joined by "-", without GREASE values
// when grease is false.
func appendDec[T ~uint8 | ~uint16](b []byte, vs []T, dropGREASE bool) []byte {
	first := true
	for _, v := range vs {
		if dropGREASE && isGREASE(uint16(v)) {
			continue
		}
		if !first {
			b = append(b, '-')
		}
		first = false
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	return b
}

func appendJA3(b []byte, h *tls.ClientHelloInfo) []byte {
	b = strconv.AppendUint(b, uint64(legacyVersion(h)), 10)
	b = append(b, ',')
	b = appendDec(b, h.CipherSuites, true)
	b = append(b, ',')
	b = appendDec(b, h.Extensions, true)
	b = append(b, ',')
	b = appendDec(b, h.SupportedCurves, true)
	b = append(b, ',')
	return appendDec(b, h.SupportedPoints, false)
}

// JA3String is "version,ciphers,extensions,curves,point_formats" in
// decimal (the JA3 input), GREASE removed.
func JA3String(h *tls.ClientHelloInfo) string {
	var buf [512]byte
	return string(appendJA3(buf[:0], h))
}

// JA3 is the MD5 of JA3String, as hex.
func JA3(h *tls.ClientHelloInfo) string {
	var buf [512]byte
	sum := md5.Sum(appendJA3(buf[:0], h))
	var out [32]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// JA4 is the JA4 TLS client fingerprint "a_b_c": a = t<ver><sni d|i><#ciphers><#exts><alpn>,
// b = sha256 of the sorted cipher list, c = sha256 of the sorted extensions
// (without SNI and ALPN) and the signature algorithms, both truncated to 12 hex.
func JA4(h *tls.ClientHelloInfo) string { return ja4(h, 't') }

// JA4QUIC is JA4 for a ClientHello carried in QUIC (protocol letter "q").
func JA4QUIC(h *tls.ClientHelloInfo) string { return ja4(h, 'q') }

func ja4(h *tls.ClientHelloInfo, proto byte) string {
	var cbuf, ebuf [64]uint16
	ciphers := keep(cbuf[:0], h.CipherSuites, func(v uint16) bool { return !isGREASE(v) })
	exts := keep(ebuf[:0], h.Extensions, func(v uint16) bool { return !isGREASE(v) })
	var out [64]byte
	b := append(out[:0], proto)
	b = append(b, ja4Version(h)...)
	b = append(b, "id"[min(len(h.ServerName), 1)])
	b = appendTwo(b, min(len(ciphers), 99))
	b = appendTwo(b, min(len(exts), 99))
	b = appendALPN(b, h.SupportedProtos)

	var in [1024]byte
	slices.Sort(ciphers)
	b = append(b, '_')
	b = appendHash12(b, appendHexList(in[:0], ciphers))

	kept := keep(ebuf[:0], exts, func(v uint16) bool { return v != extSNI && v != extALPN })
	slices.Sort(kept)
	s := appendHexList(in[:0], kept)
	if len(h.SignatureSchemes) > 0 {
		s = append(s, '_')
		s = appendHexList(s, h.SignatureSchemes)
	}
	b = append(b, '_')
	b = appendHash12(b, s)
	return string(b)
}

// keep appends the values of vs that pass ok to dst (dst may alias vs).
func keep(dst, vs []uint16, ok func(uint16) bool) []uint16 {
	for _, v := range vs {
		if ok(v) {
			dst = append(dst, v)
		}
	}
	return dst
}

func ja4Version(h *tls.ClientHelloInfo) string {
	switch maxVersion(h) {
	case tls.VersionTLS13:
		return "13"
	case tls.VersionTLS12:
		return "12"
	case tls.VersionTLS11:
		return "11"
	case tls.VersionTLS10:
		return "10"
	}
	return "00"
}

func appendTwo(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

// appendALPN appends the first and last character of the first ALPN value
// ("00" without one).
func appendALPN(b []byte, protos []string) []byte {
	if len(protos) == 0 || protos[0] == "" {
		return append(b, "00"...)
	}
	p := protos[0]
	return utf8.AppendRune(utf8.AppendRune(b, rune(p[0])), rune(p[len(p)-1]))
}

// appendHexList appends vs as 4-digit hex joined by ",".
func appendHexList[T ~uint16](b []byte, vs []T) []byte {
	const digits = "0123456789abcdef"
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, digits[v>>12&0xf], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf])
	}
	return b
}

// appendHash12 appends the first 12 hex digits of sha256(s), or 12 zeros
// for an empty s.
func appendHash12(b, s []byte) []byte {
	if len(s) == 0 {
		return append(b, "000000000000"...)
	}
	sum := sha256.Sum256(s)
	return hex.AppendEncode(b, sum[:6])
}
