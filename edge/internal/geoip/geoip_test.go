package geoip_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/geoip"
	"github.com/tailor-project/tailor/edge/internal/geoip/geoiptest"
)

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	asn := geoiptest.WriteASN(t, dir, geoiptest.ASN{Network: "10.1.0.0/16", Number: 64512, Org: "Test Net"},
		geoiptest.ASN{Network: "2001:db8::/32", Number: 4200000000, Org: "Big"})
	city := geoiptest.WriteCity(t, dir, geoiptest.Region{Network: "10.1.2.0/24", Country: "US", Sub: "CA"},
		geoiptest.Region{Network: "10.1.3.0/24", Country: "GB"},
		geoiptest.Region{Network: "10.1.4.0/24", Country: "FR", Sub: "toolong"},
		geoiptest.Region{Network: "10.1.5.0/24", Country: "usa"})
	db, err := geoip.Open(asn, city)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		addr   string
		asn    int64
		region string
	}{
		{"10.1.2.7", 64512, "US-CA"}, {"::ffff:10.1.3.1", 64512, "GB"}, {"10.1.4.1", 64512, "FR"},
		{"10.1.5.1", 64512, ""}, {"10.9.0.1", 0, ""}, {"2001:db8::1", 4200000000, ""},
	}
	for _, c := range cases {
		a, r := db.Lookup(netip.MustParseAddr(c.addr))
		if a != c.asn || r != c.region {
			t.Errorf("%s: got (%d, %q), want (%d, %q)", c.addr, a, r, c.asn, c.region)
		}
	}
	// FR-TOOLONG keeps the country; "usa" is dropped: two invalid values
	if n := db.Stats.InvalidRegion.Load(); n != 2 {
		t.Errorf("invalid regions %d, want 2", n)
	}
	if n := db.Stats.Lookups.Load(); n != int64(len(cases)) {
		t.Errorf("lookups %d, want %d", n, len(cases))
	}
	var none *geoip.DB
	if a, r := none.Lookup(netip.MustParseAddr("10.1.2.7")); a != 0 || r != "" {
		t.Errorf("nil DB looked up (%d, %q)", a, r)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.mmdb")
	if err := os.WriteFile(corrupt, []byte("not a maxmind database"), 0o644); err != nil {
		t.Fatal(err)
	}
	city := geoiptest.WriteCity(t, dir, geoiptest.Region{Network: "10.0.0.0/8", Country: "US"})
	asn := geoiptest.WriteASN(t, dir, geoiptest.ASN{Network: "10.0.0.0/8", Number: 1})
	for name, c := range map[string]struct{ asn, region, want string }{
		"missing":  {asn: filepath.Join(dir, "nope.mmdb"), want: "asn: " + filepath.Join(dir, "nope.mmdb")},
		"corrupt":  {region: corrupt, want: "region: " + corrupt},
		"swapped":  {asn: city, want: `is a "GeoLite2-City" database; want an ASN database`},
		"swapped2": {region: asn, want: `want a City or Country database`},
	} {
		_, err := geoip.Open(c.asn, c.region)
		if err == nil || !errors.Is(err, geoip.ErrGeoIP) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
}

// BenchmarkLookup: the per-connection cost of both lookups (a hit in each).
func BenchmarkLookup(b *testing.B) {
	dir := b.TempDir()
	var asns []geoiptest.ASN
	var regions []geoiptest.Region
	for i := range 200 {
		n := netip.AddrFrom4([4]byte{10, byte(i), 0, 0}).String() + "/16"
		asns = append(asns, geoiptest.ASN{Network: n, Number: uint32(64512 + i), Org: "Org"})
		regions = append(regions, geoiptest.Region{Network: n, Country: "US", Sub: "CA"})
	}
	db, err := geoip.Open(geoiptest.WriteASN(b, dir, asns...), geoiptest.WriteCity(b, dir, regions...))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	a := netip.MustParseAddr("10.77.1.2")
	b.ReportAllocs()
	for b.Loop() {
		if asn, _ := db.Lookup(a); asn == 0 {
			b.Fatal("no asn")
		}
	}
}
