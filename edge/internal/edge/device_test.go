package edge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeviceFromFingerprint: the JA4 of Go's client, mapped to "desktop" in
// a device map file, makes a device rule match (HTTP/2) and is reported;
// the same client without the map is "unknown" and gets the default.
func TestDeviceFromFingerprint(t *testing.T) {
	probe, paddr := startServer(t, Config{}, nil)
	ja4 := make(chan string, 1)
	probe.OnDecision = func(_ *Conn, st *ConnState) { ja4 <- st.JA4 }
	get(t, paddr, "localhost", "/")
	fp := <-ja4

	dir := t.TempDir()
	mapFile := filepath.Join(dir, "devices.json")
	must(t, os.WriteFile(mapFile, []byte(`{"schema":"tailor.device-map/v1","ja4":{"`+fp+`":"desktop"},"ja4_a":{"q13d0310h3":"android"}}`), 0o644))
	table := tableJSON(t, 2, h11, route{prefix: "127.0.0.0/8", device: "desktop", values: h2})
	for _, c := range []struct {
		name, devices, wantDevice, wantProto string
	}{
		{"mapped fingerprint", mapFile, "desktop", "HTTP/2.0"},
		{"no map", "", UnknownDevice, "HTTP/1.1"},
	} {
		out := &lockedBuffer{}
		s, addr := startServer(t, Config{DeviceMap: c.devices, Telemetry: "-", TelemetryOut: out}, table)
		resp, _ := get(t, addr, "localhost", "/data.bin")
		must(t, s.sink.Flush(context.Background()))
		recs := readBatches(t, out.b.Bytes())
		if resp.Proto != c.wantProto || len(recs) != 1 || recs[0].Device != c.wantDevice {
			t.Fatalf("%s: proto %s, records %+v, want %s and device %s", c.name, resp.Proto, recs, c.wantProto, c.wantDevice)
		}
		if r := recs[0]; r.HandshakeRttMs == nil || *r.HandshakeRttMs <= 0 || *r.HandshakeRttMs > 1000 {
			t.Errorf("%s: handshake_rtt_ms %v, want a loopback RTT in (0, 1000] ms", c.name, r.HandshakeRttMs)
		}
	}
}

func TestDeviceMapLookupAndErrors(t *testing.T) {
	m, err := ParseDeviceMap([]byte(`{"schema":"tailor.device-map/v1","ja4":{"t13d1516h2_aaaaaaaaaaaa_bbbbbbbbbbbb":"desktop"},"ja4_a":{"t13d1516h2":"android"}}`))
	must(t, err)
	for ja4, want := range map[string]string{
		"t13d1516h2_aaaaaaaaaaaa_bbbbbbbbbbbb": "desktop", // full match first
		"t13d1516h2_cccccccccccc_dddddddddddd": "android", // then JA4_a
		"q13d0310h3_aaaaaaaaaaaa_bbbbbbbbbbbb": UnknownDevice,
		"":                                     UnknownDevice,
	} {
		if got := m.Device(ja4); got != want {
			t.Errorf("Device(%q) = %q, want %q", ja4, got, want)
		}
	}
	if got := (*DeviceMap)(nil).Device("t13d1516h2_x_y"); got != UnknownDevice {
		t.Errorf("nil map: %q", got)
	}
	bad := []struct{ doc, field string }{
		{`[]`, "(root)"},
		{`{"schema":"x"}`, "field schema"},
		{`{"schema":"tailor.device-map/v1","ja4":{"t13d1516h2":"desktop"}}`, `ja4["t13d1516h2"]`},
		{`{"schema":"tailor.device-map/v1","ja4_a":{"t13d1516h2":""}}`, `ja4_a["t13d1516h2"]`},
		{`{"schema":"tailor.device-map/v1","extra":{}}`, `unknown field "extra"`},
	}
	for _, b := range bad {
		if _, err := ParseDeviceMap([]byte(b.doc)); err == nil || !strings.Contains(err.Error(), b.field) {
			t.Errorf("%s: error %v, want one naming %s", b.doc, err, b.field)
		}
	}
	if _, err := New(Config{Root: t.TempDir(), SelfSigned: true, DeviceMap: filepath.Join(t.TempDir(), "none.json")}); err == nil || !strings.Contains(err.Error(), "--device-map") {
		t.Errorf("missing map file: %v", err)
	}
}

// TestDeviceMapExample: the shipped example map loads.
func TestDeviceMapExample(t *testing.T) {
	m, err := LoadDeviceMap("../../cmd/tailor-edge/devices.example.json")
	must(t, err)
	if m.Len() == 0 || m.Device("q13d0312h3_55b375c5d22e_178839b6cec1") != "desktop" {
		t.Errorf("example map: %d entries", m.Len())
	}
}
