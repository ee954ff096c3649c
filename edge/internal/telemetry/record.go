// Package telemetry is the edge side of spec/telemetry.schema.json: the
// record and batch types, their validation, and the sinks that ship them
// (JSON lines to a file, or batched HTTP POSTs to the manager).
package telemetry

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SchemaID is the telemetry batch schema.
const SchemaID = "tailor.telemetry/v1"

// MaxRecords is the schema's bound on records per batch.
const MaxRecords = 10000

// ErrTelemetry prefixes sink and validation errors.
var ErrTelemetry = errors.New("telemetry")

// Batch is one telemetry document.
type Batch struct {
	Schema  string   `json:"schema"`
	Source  string   `json:"source"`
	Dropped *int64   `json:"dropped,omitempty"`
	Records []Record `json:"records"`
}

// Record is one connection (tailor-agent, kind "connection"), one response
// or one page-load beacon (tailor-edge, kinds "response" and "pageload").
type Record struct {
	Time              float64  `json:"time"`
	Kind              string   `json:"kind"`
	ClientPrefix      string   `json:"client_prefix"`
	ClientAddr        string   `json:"client_addr,omitempty"`
	Group             string   `json:"group,omitempty"`
	ConfigID          string   `json:"config_id"`
	Probability       *float64 `json:"probability,omitempty"`
	TableVersion      int64    `json:"table_version"`
	Holdback          *bool    `json:"holdback,omitempty"`
	SrttMs            *float64 `json:"srtt_ms,omitempty"`
	MinRttMs          *float64 `json:"min_rtt_ms,omitempty"`
	BytesSent         *int64   `json:"bytes_sent,omitempty"`
	BytesAcked        *int64   `json:"bytes_acked,omitempty"`
	BytesRetrans      *int64   `json:"bytes_retrans,omitempty"`
	Retransmits       *int64   `json:"retransmits,omitempty"`
	Delivered         *int64   `json:"delivered,omitempty"`
	MaxDeliveryRate   *float64 `json:"max_delivery_rate_Bps,omitempty"`
	DurationMs        *float64 `json:"duration_ms,omitempty"`
	Cwnd              *int64   `json:"cwnd,omitempty"`
	MSS               *int64   `json:"mss,omitempty"`
	CongestionControl string   `json:"congestion_control,omitempty"`
	HandshakeRttMs    *float64 `json:"handshake_rtt_ms,omitempty"`
	TTFBMs            *float64 `json:"ttfb_ms,omitempty"`
	TTLBMs            *float64 `json:"ttlb_ms,omitempty"`
	ObjectBytes       *int64   `json:"object_bytes,omitempty"`
	PLTMs             *float64 `json:"plt_ms,omitempty"`
	ALPN              string   `json:"alpn,omitempty"`
	SNI               string   `json:"sni,omitempty"`
	TLSFingerprint    string   `json:"tls_fingerprint,omitempty"`
	Device            string   `json:"device,omitempty"`
	ASN               *int64   `json:"asn,omitempty"`    // from the edge's MaxMind-format ASN database
	Region            string   `json:"region,omitempty"` // "CC" or "CC-SUB" from its City/Country database
}

var kinds = map[string]bool{"connection": true, "response": true, "pageload": true}

// Bounds of spec/telemetry.schema.json (the manager refuses a batch that
// breaks one, so the sinks drop such a record instead of sending it).
const (
	MaxSafeInt    = 9007199254740991 // dropped, table_version
	MaxTime       = 1e10             // time: unix seconds
	MaxSNI        = 253
	maxSource     = 128
	maxPrefix     = 43
	maxAddr       = 45
	maxGroup      = 320
	maxCC         = 16
	MaxALPN       = 255
	MaxDevice     = 64
	MaxFingerprnt = 128
	MaxASN        = 4294967295
	maxRegion     = 16
)

// Charsets of the schema's patterns; checked byte by byte (the sinks check
// every record, so no regexp on this path).
const (
	csPrintable   = iota // ^[!-~]*$ : printable ASCII, no space
	csPrintableSp        // ^[ -~]+$ : printable ASCII with space
	csDNS                // ^[A-Za-z0-9._-]*$
)

var csPattern = [...]string{csPrintable: "^[!-~]*$", csPrintableSp: "^[ -~]+$", csDNS: "^[A-Za-z0-9._-]*$"}

func inCharset(s string, cs int) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch cs {
		case csPrintable:
			if c < '!' || c > '~' {
				return false
			}
		case csPrintableSp:
			if c < ' ' || c > '~' {
				return false
			}
		default:
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ValidSNI reports whether s is a server name the schema accepts (at most
// 253 characters of [A-Za-z0-9._-]); the edge treats any other as absent.
func ValidSNI(s string) bool { return len(s) <= MaxSNI && inCharset(s, csDNS) }

// CheckSource checks a batch "source" (instance id): 1 to 128 printable
// ASCII characters, no spaces.
func CheckSource(s string) error { return checkString("", "source", s, 1, maxSource, csPrintable) }

// SanitizeSource makes an instance id valid: characters outside printable
// ASCII become '_', and it is cut at 128 bytes ("unknown" if empty).
func SanitizeSource(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < '!' || c > '~' {
			b[i] = '_'
		}
	}
	if len(b) > maxSource {
		b = b[:maxSource]
	}
	if len(b) == 0 {
		return "unknown"
	}
	return string(b)
}

// ValidRegion reports whether s matches the schema's region pattern
// ^[A-Z]{2}(-[A-Z0-9]{1,3})?$: an ISO 3166-1 alpha-2 country, optionally
// '-' and an ISO 3166-2 subdivision code.
func ValidRegion(s string) bool {
	if len(s) != 2 && (len(s) < 4 || len(s) > 6 || s[2] != '-') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 2:
		case c >= 'A' && c <= 'Z':
		case i > 2 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// ValidToken reports whether s fits a printable-ASCII field of at most max
// bytes (device, tls_fingerprint, alpn, congestion_control).
func ValidToken(s string, max int) bool { return len(s) <= max && inCharset(s, csPrintable) }

// checkString: maxLength (bytes; every accepted byte is ASCII, so bytes
// are characters) then the pattern. min 1 also refuses "".
func checkString(at, name, s string, min, max, cs int) error {
	if len(s) > max {
		return fieldErr(join(at, name), "%s is too long", short(s))
	}
	if len(s) < min {
		return fieldErr(join(at, name), "%s should be non-empty", short(s))
	}
	if cs >= 0 && !inCharset(s, cs) {
		return fieldErr(join(at, name), "%s does not match '%s'", short(s), csPattern[cs])
	}
	return nil
}

// join makes a field path only when an error needs it (the sinks validate
// every record: no allocation on success).
func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

// validConfigID is ^c-[0-9a-f]{10}$ without a regexp.
func validConfigID(s string) bool {
	if len(s) != 12 || s[0] != 'c' || s[1] != '-' {
		return false
	}
	for i := 2; i < 12; i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// short quotes s for a message, with control and non-ASCII bytes escaped
// and the text cut at 80 characters.
func short(s string) string {
	q := strconv.QuoteToASCII(s)
	q = "'" + strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`) + "'"
	if len(q) > 80 {
		q = q[:77] + "..."
	}
	return q
}

// Validate checks a batch against the schema (what Go produces: the typed
// fields; see ParseBatch for a document from outside).
func (b *Batch) Validate() error {
	if b.Schema != SchemaID {
		return fieldErr("schema", "'%s' was expected", SchemaID)
	}
	if err := CheckSource(b.Source); err != nil {
		return err
	}
	if len(b.Records) > MaxRecords {
		return fieldErr("records", "is too long (%d > %d)", len(b.Records), MaxRecords)
	}
	if d := b.Dropped; d != nil && *d < 0 {
		return fieldErr("dropped", "%d is less than the minimum of 0", *d)
	} else if d != nil && *d > MaxSafeInt {
		return fieldErr("dropped", "%d is greater than the maximum of %d", *d, int64(MaxSafeInt))
	}
	for i := range b.Records {
		if err := b.Records[i].validate(fmt.Sprintf("records[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks one record against the schema; the error names the
// field as "records[0].<name>".
func (r *Record) Validate() error { return r.validate("records[0]") }

type intField struct {
	name string
	v    *int64
	max  int64
}

type floatField struct {
	name string
	v    *float64
	max  float64
}

func (r *Record) validate(at string) error {
	if err := checkNumber(at, "time", r.Time, 0, MaxTime); err != nil {
		return err
	}
	if !kinds[r.Kind] {
		return fieldErr(at+".kind", "%s is not one of ['connection', 'response', 'pageload']", short(r.Kind))
	}
	if r.ConfigID == "" {
		return fieldErr(at, "'config_id' is a required property")
	}
	if !validConfigID(r.ConfigID) {
		return fieldErr(at+".config_id", "%s does not match '^c-[0-9a-f]{10}$'", short(r.ConfigID))
	}
	if r.ClientPrefix == "" {
		return fieldErr(at, "'client_prefix' is a required property")
	}
	if r.TableVersion < 0 || r.TableVersion > MaxSafeInt {
		return fieldErr(at+".table_version", "%d is outside [0, %d]", r.TableVersion, int64(MaxSafeInt))
	}
	if p := r.Probability; p != nil && !(*p > 0) {
		return fieldErr(at+".probability", "%v is less than or equal to the minimum of 0", *p)
	} else if p != nil && *p > 1 {
		return fieldErr(at+".probability", "%v is greater than the maximum of 1", *p)
	}
	strs := []struct {
		name, v      string
		min, max, cs int
	}{
		{"client_prefix", r.ClientPrefix, 1, maxPrefix, -1},
		{"client_addr", r.ClientAddr, 0, maxAddr, -1},
		{"group", r.Group, 0, maxGroup, csPrintableSp}, // "" = omitted (omitempty)
		{"congestion_control", r.CongestionControl, 0, maxCC, csPrintable},
		{"alpn", r.ALPN, 0, MaxALPN, csPrintable},
		{"sni", r.SNI, 0, MaxSNI, csDNS},
		{"tls_fingerprint", r.TLSFingerprint, 0, MaxFingerprnt, csPrintable},
		{"device", r.Device, 0, MaxDevice, csPrintable},
	}
	for _, f := range strs {
		if f.v == "" && f.min == 0 {
			continue
		}
		if err := checkString(at, f.name, f.v, f.min, f.max, f.cs); err != nil {
			return err
		}
	}
	if r.Region != "" && len(r.Region) > maxRegion {
		return fieldErr(at+".region", "%s is too long", short(r.Region))
	} else if r.Region != "" && !ValidRegion(r.Region) {
		return fieldErr(at+".region", "%s does not match '^[A-Z]{2}(-[A-Z0-9]{1,3})?$'", short(r.Region))
	}
	const bytesMax, countMax = 1 << 50, 1 << 40
	for _, f := range [...]intField{{"bytes_sent", r.BytesSent, bytesMax}, {"bytes_acked", r.BytesAcked, bytesMax},
		{"bytes_retrans", r.BytesRetrans, bytesMax}, {"retransmits", r.Retransmits, countMax}, {"delivered", r.Delivered, countMax},
		{"cwnd", r.Cwnd, 2147483647}, {"mss", r.MSS, 65535}, {"object_bytes", r.ObjectBytes, bytesMax}, {"asn", r.ASN, MaxASN}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return fieldErr(at+"."+f.name, "%d is less than the minimum of 0", *f.v)
		}
		if *f.v > f.max {
			return fieldErr(at+"."+f.name, "%d is greater than the maximum of %d", *f.v, f.max)
		}
	}
	for _, f := range [...]floatField{{"handshake_rtt_ms", r.HandshakeRttMs, 600000}, {"srtt_ms", r.SrttMs, 600000},
		{"min_rtt_ms", r.MinRttMs, 600000}, {"max_delivery_rate_Bps", r.MaxDeliveryRate, 125e9},
		{"duration_ms", r.DurationMs, 604800000}, {"ttfb_ms", r.TTFBMs, 86400000}, {"ttlb_ms", r.TTLBMs, 86400000},
		{"plt_ms", r.PLTMs, 3600000}} {
		if f.v == nil {
			continue
		}
		if err := checkNumber(at, f.name, *f.v, 0, f.max); err != nil {
			return err
		}
	}
	return nil
}

// checkNumber: finite and within [lo, hi] (NaN fails both comparisons;
// encoding/json cannot even encode it).
func checkNumber(at, name string, v, lo, hi float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fieldErr(join(at, name), "%v is not a finite number", v)
	case v < lo:
		return fieldErr(join(at, name), "%v is less than the minimum of %v", v, lo)
	case v > hi:
		return fieldErr(join(at, name), "%v is greater than the maximum of %v", v, hi)
	}
	return nil
}

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: field %s: %s", ErrTelemetry, field, fmt.Sprintf(format, args...))
}

// Ptr returns a pointer to v (for optional record fields).
func Ptr[T any](v T) *T { return &v }
