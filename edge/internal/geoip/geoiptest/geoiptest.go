// Package geoiptest writes small MaxMind-format databases for tests with
// github.com/maxmind/mmdbwriter: nothing is downloaded.
package geoiptest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// ASN is one network of an ASN database.
type ASN struct {
	Network string // CIDR
	Number  uint32
	Org     string
}

// Region is one network of a City database: Sub "" leaves subdivisions out.
type Region struct {
	Network, Country, Sub string
}

// WriteASN writes a GeoLite2-ASN-format database to dir and returns its path.
func WriteASN(t testing.TB, dir string, nets ...ASN) string {
	t.Helper()
	w := newTree(t, "GeoLite2-ASN")
	for _, n := range nets {
		insert(t, w, n.Network, mmdbtype.Map{
			"autonomous_system_number":       mmdbtype.Uint32(n.Number),
			"autonomous_system_organization": mmdbtype.String(n.Org),
		})
	}
	return write(t, w, filepath.Join(dir, "asn.mmdb"))
}

// WriteCity writes a GeoLite2-City-format database (country.iso_code and
// subdivisions[].iso_code) to dir and returns its path.
func WriteCity(t testing.TB, dir string, nets ...Region) string {
	t.Helper()
	w := newTree(t, "GeoLite2-City")
	for _, n := range nets {
		rec := mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(n.Country)}}
		if n.Sub != "" {
			rec["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String(n.Sub)}}
		}
		insert(t, w, n.Network, rec)
	}
	return write(t, w, filepath.Join(dir, "city.mmdb"))
}

// newTree is an IPv6 tree (IPv4 networks aliased into it) that accepts
// reserved networks: tests use loopback and 10/8 addresses.
func newTree(t testing.TB, typ string) *mmdbwriter.Tree {
	t.Helper()
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: typ, RecordSize: 24, IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func insert(t testing.TB, w *mmdbwriter.Tree, cidr string, rec mmdbtype.Map) {
	t.Helper()
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Insert(n, rec); err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, w *mmdbwriter.Tree, path string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
