package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

const vectors = "../../../spec/vectors/telemetry/"

func TestVectors(t *testing.T) {
	b, err := os.ReadFile(vectors + "invalid.json")
	if err != nil {
		t.Skipf("shared vectors not reachable: %v", err)
	}
	var inv struct {
		Cases map[string]struct {
			Field, Contains string
			Batch           json.RawMessage
			Raw             *string
		}
	}
	if err := json.Unmarshal(b, &inv); err != nil {
		t.Fatal(err)
	}
	if len(inv.Cases) == 0 {
		t.Fatal("no cases")
	}
	for name, c := range inv.Cases {
		doc := []byte(c.Batch)
		if c.Raw != nil {
			doc = []byte(*c.Raw)
		}
		_, err := ParseBatch(doc)
		if err == nil || !strings.Contains(err.Error(), "field "+c.Field+":") || !strings.Contains(err.Error(), c.Contains) {
			t.Errorf("%s: got %v, want an error naming field %s with %q", name, err, c.Field, c.Contains)
		}
	}
	var valid struct{ Batch json.RawMessage }
	if b, err := os.ReadFile(vectors + "valid.json"); err != nil || json.Unmarshal(b, &valid) != nil {
		t.Fatal("valid.json unreadable")
	}
	if _, err := ParseBatch(valid.Batch); err != nil {
		t.Errorf("valid.json: %v", err)
	}
}

func connRecord() Record {
	return Record{Time: 1, Kind: "connection", ClientPrefix: "10.0.0.0/24", ConfigID: "c-bf21a9e8fb", Probability: Ptr(1.0), BytesSent: Ptr[int64](10)}
}

func TestLineSinkWritesValidBatches(t *testing.T) {
	var buf bytes.Buffer
	s := NewLineSink(&buf, "agent-1")
	s.Add(connRecord())
	s.Add(connRecord())
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := json.Unmarshal(buf.Bytes(), &b); err != nil || len(b.Records) != 2 || b.Validate() != nil {
		t.Fatalf("line %q: %v %v", buf.String(), err, b.Validate())
	}
}

func TestHTTPSinkBoundedBufferAndToken(t *testing.T) {
	var got atomic.Int64
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b Batch
		if r.Header.Get("Authorization") != "Bearer tok" || json.NewDecoder(r.Body).Decode(&b) != nil || fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got.Add(int64(len(b.Records)))
		if b.Dropped != nil && *b.Dropped > 0 {
			got.Add(1000 * *b.Dropped)
		}
	}))
	defer srv.Close()
	s := &HTTPSink{URL: srv.URL, Token: "tok", Source: "a", Limit: 3}
	fail.Store(true)
	for i := 0; i < 5; i++ {
		s.Add(connRecord())
	}
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("flush to a failing manager must fail")
	}
	fail.Store(false)
	if err := s.Flush(context.Background()); err != nil { // in backoff: no attempt
		t.Fatal(err)
	}
	if got.Load() != 0 {
		t.Fatal("a flush during the backoff must not post")
	}
	if err := s.Flush(Final(context.Background())); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 3+2000 || s.Dropped() != 2 {
		t.Fatalf("delivered %d (want 3 records + dropped=2 reported), Dropped()=%d", got.Load(), s.Dropped())
	}
}
