// Package telemetry is the edge side of spec/telemetry.schema.json: the
// record and batch types, their validation, and the sinks that ship them
// (JSON lines to a file, or batched HTTP POSTs to the manager).
package telemetry

import (
	"errors"
	"fmt"
	"regexp"
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
}

var configID = regexp.MustCompile(`^c-[0-9a-f]{10}$`)

var kinds = map[string]bool{"connection": true, "response": true, "pageload": true}

// Validate checks the fields the agent writes against the schema.
func (b *Batch) Validate() error {
	if b.Schema != SchemaID {
		return fieldErr("schema", "'%s' was expected", SchemaID)
	}
	if b.Source == "" {
		return fieldErr("source", "'' should be non-empty")
	}
	if len(b.Records) > MaxRecords {
		return fieldErr("records", "is too long (%d > %d)", len(b.Records), MaxRecords)
	}
	if b.Dropped != nil && *b.Dropped < 0 {
		return fieldErr("dropped", "%d is less than the minimum of 0", *b.Dropped)
	}
	for i := range b.Records {
		if err := b.Records[i].validate(fmt.Sprintf("records[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func (r *Record) validate(at string) error {
	if !kinds[r.Kind] {
		return fieldErr(at+".kind", "'%s' is not one of ['connection', 'response', 'pageload']", r.Kind)
	}
	if !configID.MatchString(r.ConfigID) {
		return fieldErr(at, "'config_id' is a required property matching ^c-[0-9a-f]{10}$")
	}
	if r.ClientPrefix == "" || r.TableVersion < 0 {
		return fieldErr(at, "client_prefix and table_version >= 0 are required")
	}
	if p := r.Probability; p != nil && (*p <= 0 || *p > 1) {
		return fieldErr(at+".probability", "%v is less than or equal to the minimum of 0 or above 1", *p)
	}
	ints := map[string]*int64{"bytes_sent": r.BytesSent, "bytes_acked": r.BytesAcked, "bytes_retrans": r.BytesRetrans,
		"retransmits": r.Retransmits, "delivered": r.Delivered, "cwnd": r.Cwnd, "mss": r.MSS, "object_bytes": r.ObjectBytes}
	for name, v := range ints {
		if v != nil && *v < 0 {
			return fieldErr(at+"."+name, "%d is less than the minimum of 0", *v)
		}
	}
	floats := map[string]*float64{"srtt_ms": r.SrttMs, "min_rtt_ms": r.MinRttMs, "max_delivery_rate_Bps": r.MaxDeliveryRate,
		"duration_ms": r.DurationMs, "handshake_rtt_ms": r.HandshakeRttMs, "ttfb_ms": r.TTFBMs, "ttlb_ms": r.TTLBMs, "plt_ms": r.PLTMs}
	for name, v := range floats {
		if v != nil && *v < 0 {
			return fieldErr(at+"."+name, "%v is less than the minimum of 0", *v)
		}
	}
	return nil
}

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: field %s: %s", ErrTelemetry, field, fmt.Sprintf(format, args...))
}

// Ptr returns a pointer to v (for optional record fields).
func Ptr[T any](v T) *T { return &v }
