package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Sink receives records; Flush ships what is buffered.
type Sink interface {
	Add(r Record)
	Flush(ctx context.Context) error
	// Dropped is how many records were lost in total (bounded buffer).
	Dropped() int64
}

// LineSink writes one batch per Flush as a JSON line. It holds at most
// Limit records between flushes; beyond that it drops and counts them.
type LineSink struct {
	Limit int // buffer bound in records; default 50000

	mu         sync.Mutex
	w          io.Writer
	source     string
	pending    []Record
	dropped    int64 // since the last written batch
	droppedAll int64
}

// NewLineSink writes batches from source to w.
func NewLineSink(w io.Writer, source string) *LineSink { return &LineSink{w: w, source: source} }

// Add buffers r, or drops it when the buffer is full.
func (s *LineSink) Add(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= bound(s.Limit) {
		s.dropped++
		s.droppedAll++
		return
	}
	s.pending = append(s.pending, r)
}

// Flush writes the buffered records, MaxRecords per line.
func (s *LineSink) Flush(context.Context) error {
	s.mu.Lock()
	recs, dropped := s.pending, s.dropped
	s.pending, s.dropped = nil, 0
	s.mu.Unlock()
	for first := true; len(recs) > 0 || (first && dropped > 0); first = false {
		n := min(len(recs), MaxRecords)
		b, err := json.Marshal(Batch{Schema: SchemaID, Source: s.source, Dropped: Ptr(dropped), Records: recs[:n]})
		if err != nil {
			return fmt.Errorf("%w: encode: %v", ErrTelemetry, err)
		}
		if _, err := s.w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("%w: write: %v", ErrTelemetry, err)
		}
		recs, dropped = recs[n:], 0
	}
	return nil
}

// Dropped is the total number of records dropped so far.
func (s *LineSink) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.droppedAll
}

func bound(limit int) int {
	if limit > 0 {
		return limit
	}
	return 50000
}

// HTTPSink POSTs batches to a manager URL with a bearer token. It holds at
// most Limit records; beyond that it drops the newest and counts them, and
// reports the count in the next batch's "dropped".
type HTTPSink struct {
	URL    string       // manager endpoint
	Token  string       // bearer token ("" = no Authorization header)
	Source string       // agent instance id
	Limit  int          // buffer bound in records; default 50000
	Client *http.Client // default: 10 s timeout

	mu         sync.Mutex
	pending    []Record
	dropped    int64 // since the last successful POST
	droppedAll int64
}

// Add buffers r, or drops it when the buffer is full.
func (s *HTTPSink) Add(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= bound(s.Limit) {
		s.dropped++
		s.droppedAll++
		return
	}
	s.pending = append(s.pending, r)
}

// Flush POSTs up to MaxRecords records; on failure they stay buffered.
func (s *HTTPSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	n := min(len(s.pending), MaxRecords)
	batch := Batch{Schema: SchemaID, Source: s.Source, Dropped: Ptr(s.dropped), Records: append([]Record(nil), s.pending[:n]...)}
	s.mu.Unlock()
	if n == 0 && *batch.Dropped == 0 {
		return nil
	}
	if err := s.post(ctx, batch); err != nil {
		return err
	}
	s.mu.Lock()
	s.pending = s.pending[n:]
	s.dropped -= *batch.Dropped
	s.mu.Unlock()
	return nil
}

func (s *HTTPSink) post(ctx context.Context, b Batch) error {
	body, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("%w: encode: %v", ErrTelemetry, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTelemetry, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return fmt.Errorf("%w: post: %v", ErrTelemetry, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%w: post %s: %s", ErrTelemetry, s.URL, resp.Status)
	}
	return nil
}

// Dropped is the total number of records dropped so far.
func (s *HTTPSink) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.droppedAll
}

func (s *HTTPSink) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}
