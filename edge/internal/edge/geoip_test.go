package edge

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/geoip/geoiptest"
	"github.com/tailor-project/tailor/edge/internal/metrics"
)

// getFrom fetches path over TCP from source address src (any 127/8
// address works on loopback).
func getFrom(t *testing.T, addr, src, path string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 3 * time.Second}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "site.test"}, DialContext: d.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + path)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestGeoIPEnrichesRecords: with test databases written by mmdbwriter,
// records of real TCP and QUIC connections carry the client's asn and
// region; a subdivision outside the schema's pattern is dropped (the
// country stays) and counted; an address in neither database gets neither.
func TestGeoIPEnrichesRecords(t *testing.T) {
	dir := t.TempDir()
	asn := geoiptest.WriteASN(t, dir, geoiptest.ASN{Network: "127.0.0.0/16", Number: 64512, Org: "Test West"},
		geoiptest.ASN{Network: "127.2.0.0/16", Number: 4200000001, Org: "Test Private"})
	city := geoiptest.WriteCity(t, dir, geoiptest.Region{Network: "127.0.0.0/16", Country: "US", Sub: "CA"},
		geoiptest.Region{Network: "127.2.0.0/16", Country: "GB", Sub: "toolong"})
	out := &lockedBuffer{}
	s, addr := startServer(t, Config{QUIC: true, Telemetry: "-", TelemetryOut: out, ConnRecords: true, Metrics: "127.0.0.1:0",
		GeoIPASN: asn, GeoIPRegion: city}, nil)
	getFrom(t, addr, "127.0.0.1", "/data.bin")
	getFrom(t, addr, "127.2.0.1", "/data.bin")
	getFrom(t, addr, "127.9.0.1", "/data.bin")
	h3Get(t, addr, "127.0.0.7", "localhost", "/data.bin")
	m, err := metrics.Scrape("http://" + s.MetricsAddr() + metrics.Path)
	must(t, err)
	for name, want := range map[string]float64{"tailor_edge_geoip_lookups_total": 4, "tailor_edge_geoip_asn_found_total": 3,
		"tailor_edge_geoip_region_found_total": 3, "tailor_edge_geoip_invalid_region_total": 1,
		// QUIC is counted too: its decision, its handshake (h3), its device and RTT
		"tailor_edge_decisions_total": 4, "tailor_edge_handshakes_total": 4, "tailor_edge_handshake_rtt_seconds_count": 4,
		"tailor_edge_connections_by_device_total": 4} {
		if got := m.Value(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	must(t, s.Close()) // the connection records are made at close
	recs := readBatches(t, out.b.Bytes())
	want := map[string]struct {
		asn    int64
		region string
	}{"127.0.0.0/24 response http/1.1": {64512, "US-CA"}, "127.2.0.0/24 response http/1.1": {4200000001, "GB"},
		"127.9.0.0/24 response http/1.1": {0, ""}, "127.0.0.0/24 response h3": {64512, "US-CA"}}
	seen := map[string]int{}
	for _, r := range recs {
		key := r.ClientPrefix + " " + r.Kind + " " + r.ALPN
		if r.Kind == "connection" {
			key = r.ClientPrefix + " response " + r.ALPN // the connection's record carries the same
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected record %s", key)
			continue
		}
		seen[key]++
		got := int64(0)
		if r.ASN != nil {
			got = *r.ASN
		}
		if got != w.asn || r.Region != w.region || (w.asn == 0) != (r.ASN == nil) {
			t.Errorf("%s (%s): asn %d region %q, want %d %q", key, r.Kind, got, r.Region, w.asn, w.region)
		}
	}
	for k := range want {
		if seen[k] != 2 { // a response and its connection's record
			t.Errorf("%s: %d records, want 2", k, seen[k])
		}
	}
	if n := s.geo.Stats.InvalidRegion.Load(); n != 1 {
		t.Errorf("invalid regions %d, want 1 (GB-TOOLONG)", n)
	}
	if n := s.geo.Stats.Lookups.Load(); n != 4 {
		t.Errorf("lookups %d, want 4 (one per connection)", n)
	}
}

// TestGeoIPStartupErrors: a missing or corrupt database is one startup
// error naming the flag and the file.
func TestGeoIPStartupErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.mmdb")
	must(t, os.WriteFile(corrupt, []byte(strings.Repeat("\xab", 4096)), 0o644))
	missing := filepath.Join(dir, "missing.mmdb")
	www := filepath.Join(dir, "www")
	must(t, os.MkdirAll(www, 0o755))
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{GeoIPASN: missing}, "--geoip-asn " + missing + ": open "},
		{Config{GeoIPRegion: corrupt}, "--geoip-region " + corrupt + ": "},
		{Config{GeoIPRegion: geoiptest.WriteASN(t, dir, geoiptest.ASN{Network: "10.0.0.0/8", Number: 1})}, `want a City or Country database`},
	} {
		c.cfg.Root, c.cfg.SelfSigned, c.cfg.Metrics = www, true, "127.0.0.1:0"
		s, err := New(c.cfg)
		if err == nil {
			_ = s.Close()
			t.Errorf("%+v: started", c.cfg)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("got %q, want one config error with %q", err, c.want)
		}
	}
}
