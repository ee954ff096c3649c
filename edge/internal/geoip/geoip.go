// Package geoip maps a client address to its autonomous system and region
// with MaxMind-format databases (GeoLite2-ASN; GeoLite2-City or -Country),
// read with maxminddb-golang. Values are checked against the telemetry
// schema's bounds: an out-of-bounds value is dropped and counted, never
// reported.
package geoip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/oschwald/maxminddb-golang/v2"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// ErrGeoIP prefixes database errors.
var ErrGeoIP = errors.New("geoip")

// DB is an ASN database, a region database, or both; a nil *DB (or a nil
// half) looks nothing up.
type DB struct {
	asn, region *maxminddb.Reader
	Stats       Stats
}

// Stats count lookups and their outcomes (one lookup per connection).
type Stats struct {
	Lookups       atomic.Int64 // addresses looked up
	ASNFound      atomic.Int64 // with a valid ASN
	RegionFound   atomic.Int64 // with a valid region (country at least)
	InvalidASN    atomic.Int64 // ASN out of the schema's bounds or of the wrong type: dropped
	InvalidRegion atomic.Int64 // country or subdivision code outside the schema's pattern: dropped (a bad subdivision keeps the country)
	Errors        atomic.Int64 // lookups that failed (a corrupt data section)
}

// OpenError is a database that could not be opened.
type OpenError struct {
	Which string // "asn" or "region"
	Path  string
	Err   error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("%v: %s: %s: %v", ErrGeoIP, e.Which, e.Path, e.Err)
}
func (e *OpenError) Unwrap() []error { return []error{ErrGeoIP, e.Err} }

// Open opens the ASN database at asnPath and the region database at
// regionPath ("" = not configured). The error says which one failed and
// why: missing, not a MaxMind DB, or a database of the other kind.
func Open(asnPath, regionPath string) (*DB, error) {
	d := &DB{}
	var err error
	if asnPath != "" {
		if d.asn, err = open(asnPath, "an ASN", "City", "Country"); err != nil {
			return nil, &OpenError{Which: "asn", Path: asnPath, Err: err}
		}
	}
	if regionPath != "" {
		if d.region, err = open(regionPath, "a City or Country", "ASN", "ISP"); err != nil {
			_ = d.Close()
			return nil, &OpenError{Which: "region", Path: regionPath, Err: err}
		}
	}
	return d, nil
}

// open opens a database and refuses one whose type names another kind
// (e.g. a City database given as the ASN database), which would silently
// give no values. Other vendors' type names are accepted.
func open(path, want string, refuse ...string) (*maxminddb.Reader, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, err
	}
	typ := r.Metadata.DatabaseType
	for _, other := range refuse {
		if strings.Contains(typ, other) {
			_ = r.Close()
			return nil, fmt.Errorf("is a %q database; want %s database", typ, want)
		}
	}
	return r, nil
}

// Type names the databases opened ("" for none), for the startup log.
func (d *DB) Type() string {
	var parts []string
	for _, r := range []*maxminddb.Reader{d.asn, d.region} {
		if r != nil {
			parts = append(parts, fmt.Sprintf("%s (built %s)", r.Metadata.DatabaseType, r.Metadata.BuildTime().Format("2006-01-02")))
		}
	}
	return strings.Join(parts, ", ")
}

// Close releases the databases.
func (d *DB) Close() error {
	if d == nil {
		return nil
	}
	var err error
	for _, r := range []*maxminddb.Reader{d.asn, d.region} {
		if r != nil {
			err = errors.Join(err, r.Close())
		}
	}
	return err
}

type asnRecord struct {
	Number uint64 `maxminddb:"autonomous_system_number"`
}

type isoCode struct {
	ISOCode string `maxminddb:"iso_code"`
}

type regionRecord struct {
	Country           isoCode   `maxminddb:"country"`
	RegisteredCountry isoCode   `maxminddb:"registered_country"`
	Subdivisions      []isoCode `maxminddb:"subdivisions"`
}

// Lookup returns a's ASN (0 = unknown) and region ("" = unknown): "CC"
// from country.iso_code (registered_country when absent) and "CC-SUB"
// when subdivisions[0].iso_code is there too.
func (d *DB) Lookup(a netip.Addr) (asn int64, region string) {
	if d == nil || !a.IsValid() || d.asn == nil && d.region == nil {
		return 0, ""
	}
	d.Stats.Lookups.Add(1)
	a = a.Unmap()
	if d.asn != nil {
		asn = d.lookupASN(a)
	}
	if d.region != nil {
		region = d.lookupRegion(a)
	}
	return asn, region
}

func (d *DB) lookupASN(a netip.Addr) int64 {
	var rec asnRecord
	res := d.asn.Lookup(a)
	if !res.Found() {
		if res.Err() != nil {
			d.Stats.Errors.Add(1)
		}
		return 0
	}
	if err := res.Decode(&rec); err != nil {
		d.Stats.InvalidASN.Add(1) // e.g. a string where the number belongs
		return 0
	}
	if rec.Number > telemetry.MaxASN {
		d.Stats.InvalidASN.Add(1)
		return 0
	}
	if rec.Number > 0 {
		d.Stats.ASNFound.Add(1)
	}
	return int64(rec.Number)
}

func (d *DB) lookupRegion(a netip.Addr) string {
	var rec regionRecord
	res := d.region.Lookup(a)
	if !res.Found() {
		if res.Err() != nil {
			d.Stats.Errors.Add(1)
		}
		return ""
	}
	if err := res.Decode(&rec); err != nil {
		d.Stats.InvalidRegion.Add(1)
		return ""
	}
	cc := rec.Country.ISOCode
	if cc == "" {
		cc = rec.RegisteredCountry.ISOCode
	}
	if cc == "" {
		return ""
	}
	if len(cc) != 2 || !telemetry.ValidRegion(cc) {
		d.Stats.InvalidRegion.Add(1)
		return ""
	}
	d.Stats.RegionFound.Add(1)
	if len(rec.Subdivisions) == 0 || rec.Subdivisions[0].ISOCode == "" {
		return cc
	}
	if full := cc + "-" + rec.Subdivisions[0].ISOCode; telemetry.ValidRegion(full) {
		return full
	}
	d.Stats.InvalidRegion.Add(1) // the country stays
	return cc
}
