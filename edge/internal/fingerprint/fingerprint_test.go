package fingerprint

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"
)

func TestCheckOwnHost(t *testing.T) {
	local := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("10.77.0.0/30")}
	for _, tc := range []struct {
		addr string
		own  bool
		ok   bool
	}{
		{"127.0.0.1", false, true},
		{"::1", false, true},
		{"198.51.100.10", false, true}, // on a link of this host
		{"10.77.0.2", false, true},     // a namespace behind a veth
		{"::ffff:10.77.0.1", false, true},
		{"10.77.0.5", false, false},       // private, but behind a gateway
		{"192.168.255.254", false, false}, // private, not ours
		{"fd00::1", false, false},
		{"8.8.8.8", false, false},
		{"100.64.0.1", false, false},
		{"169.254.1.1", false, false},
		{"2001:db8::1", false, false},
		{"8.8.8.8", true, true},
		{"10.1.2.3", true, true},
	} {
		err := CheckOwnHost(netip.MustParseAddr(tc.addr), local, tc.own)
		if (err == nil) != tc.ok {
			t.Errorf("CheckOwnHost(%s, own=%v) = %v, want ok=%v", tc.addr, tc.own, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrNotOwnHost) {
			t.Errorf("CheckOwnHost(%s): %v does not wrap ErrNotOwnHost", tc.addr, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1": "10.0.0.1:443", "10.0.0.1:8443": "10.0.0.1:8443",
		"[fd00::1]:9443": "[fd00::1]:9443", "fd00::1": "[fd00::1]:443"} {
		got, err := ParseTarget(t.Context(), in)
		if err != nil || got.Addr.String() != want {
			t.Errorf("ParseTarget(%q) = %v, %v; want %s", in, got.Addr, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.1:0", "10.0.0.1:70000", ":443", "10.0.0.1:x"} {
		if _, err := ParseTarget(t.Context(), bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
}

func seg(at time.Duration, seq uint32, n, gso int) segment {
	return segment{At: time.Unix(0, 0).Add(at), Seq: seq, Flags: flagACK, Payload: n, GSOSize: gso}
}

func TestAnalyzeFlight(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		name         string
		pkts         []segment
		segs, bytes  int
		tlp, retrans bool
	}{
		{"gso bursts, tail loss probe, retransmission", []segment{
			seg(0, 1000, 16413, 1448), seg(10*us, 17413, 16413, 1448), seg(20*us, 33826, 11584, 1448),
			seg(10*time.Millisecond, 45410, 1448, 0), seg(210*time.Millisecond, 1000, 1448, 0)}, 32, 44410, true, true},
		{"single segments, no probe", []segment{
			seg(0, 1, 1448, 0), seg(5*us, 1449, 1448, 0), seg(9*us, 2897, 1448, 0), seg(200*time.Millisecond, 1, 1448, 0)},
			3, 4344, false, true},
		{"paced flight keeps its last segment", []segment{
			seg(0, 1, 1448, 0), seg(2*time.Millisecond, 1449, 1448, 0), seg(4*time.Millisecond, 2897, 1448, 0),
			seg(300*time.Millisecond, 1, 1448, 0)}, 3, 4344, false, true},
		{"sequence wrap", []segment{
			seg(0, 0xffffff00, 1448, 0), seg(3*us, 1448-0x100, 1448, 0), seg(time.Second, 0xffffff00, 1448, 0)},
			2, 2896, false, true},
	} {
		f := analyzeFlight(tc.pkts, tc.pkts[0].Seq)
		if f.segments != tc.segs || f.bytes != tc.bytes || f.tlp != tc.tlp || f.retrans != tc.retrans || f.mss != 1448 {
			t.Errorf("%s: got %+v, want %d segments, %d bytes, tlp %v, retrans %v", tc.name, f, tc.segs, tc.bytes, tc.tlp, tc.retrans)
		}
	}
}

func TestBetterIW(t *testing.T) {
	full := func(n int) *IWResult { return &IWResult{Segments: n, Retransmission: true} }
	bound := func(n int) *IWResult { return &IWResult{Segments: n, Retransmission: true, LowerBound: true} }
	for _, tc := range []struct {
		name string
		a, b *IWResult
		want bool
	}{
		{"smaller complete count wins", full(32), full(33), true},
		{"larger complete count loses", full(33), full(32), false},
		{"equal counts keep the first", full(32), full(32), false},
		{"complete beats a lower bound", full(10), bound(40), true},
		{"a lower bound never beats a complete count", bound(40), full(10), false},
		{"no retransmission is not complete", &IWResult{Segments: 5}, full(32), false},
		{"between lower bounds the larger says more", bound(40), bound(30), true},
	} {
		if got := betterIW(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: betterIW = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseSynOptions(t *testing.T) {
	r := &SynAckResult{WindowScale: -1}
	parseSynOptions([]byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 3, 3, 10}, r)
	if r.MSS != 1460 || !r.SACK || !r.Timestamps || r.WindowScale != 10 {
		t.Fatalf("got %+v", r)
	}
	r = &SynAckResult{WindowScale: -1}
	parseSynOptions([]byte{2, 4, 0x05}, r) // truncated: nothing read, no panic
	if r.MSS != 0 || r.WindowScale != -1 {
		t.Fatalf("truncated options read as %+v", r)
	}
}

// TestFilterLoadsAndAttaches checks the hand-written program passes the verifier and attaches at
// TCX egress of loopback (root only; the link goes with the test's file descriptors).
func TestFilterLoadsAndAttaches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loading a BPF program and attaching it at tcx egress")
	}
	f, err := newACKFilter(1, 14)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Drop(40000, 443); err != nil {
		t.Fatal(err)
	}
	f.Release(40000, 443)
}
