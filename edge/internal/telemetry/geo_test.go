package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestValidRegion(t *testing.T) {
	for s, want := range map[string]bool{"US": true, "US-CA": true, "GB-ENG": true, "FR-75": true, "DE-1": true,
		"": false, "U": false, "us": false, "USA": false, "US-": false, "US-CALI": false, "US_CA": false, "1A": false, "US-c": false} {
		if got := ValidRegion(s); got != want {
			t.Errorf("ValidRegion(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestRecordASNAndRegionBounds(t *testing.T) {
	cases := []struct {
		asn    int64
		region string
		field  string // "" = valid
	}{
		{15169, "US-CA", ""}, {0, "US", ""}, {MaxASN, "", ""},
		{MaxASN + 1, "", "records[0].asn"}, {-1, "", "records[0].asn"},
		{1, "us-ca", "records[0].region"}, {1, "US-CALIFORNIA", "records[0].region"},
	}
	for _, c := range cases {
		r := connRecord()
		r.ASN, r.Region = Ptr(c.asn), c.region
		err := r.Validate()
		if c.field == "" && err != nil || c.field != "" && (err == nil || !strings.Contains(err.Error(), "field "+c.field+":")) {
			t.Errorf("asn %d region %q: got %v, want field %q", c.asn, c.region, err, c.field)
		}
	}
}

// A record with asn and region round-trips through a sink and ParseBatch,
// and the sink counts what it shipped.
func TestSinkShipsASNAndRegion(t *testing.T) {
	var buf bytes.Buffer
	s := NewLineSink(&buf, "edge-1")
	r := connRecord()
	r.ASN, r.Region = Ptr[int64](64512), "US-CA"
	s.Add(r)
	bad := connRecord()
	bad.Region = "nowhere"
	s.Add(bad)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := ParseBatch(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Records) != 1 || b.Records[0].ASN == nil || *b.Records[0].ASN != 64512 || b.Records[0].Region != "US-CA" {
		out, _ := json.Marshal(b.Records)
		t.Fatalf("records %s", out)
	}
	if st := s.Stats(); st.Sent != 1 || st.Invalid != 1 || st.Dropped != 1 {
		t.Errorf("stats %+v, want sent 1, invalid 1, dropped 1", st)
	}
}
