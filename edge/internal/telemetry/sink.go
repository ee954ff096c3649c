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

// queue is the bounded record buffer both sinks share: beyond the bound it
// drops the newest records and counts them, and the count travels in the
// next shipped batch's "dropped".
type queue struct {
	mu         sync.Mutex
	pending    []Record
	dropped    int64 // since the last shipped batch
	droppedAll int64
}

func (q *queue) add(r Record, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= bound(limit) {
		q.dropped++
		q.droppedAll++
		return
	}
	q.pending = append(q.pending, r)
}

// peek copies up to MaxRecords pending records and the drops not yet reported.
func (q *queue) peek() ([]Record, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.pending), MaxRecords)
	return append([]Record(nil), q.pending[:n]...), q.dropped
}

// commit forgets n shipped records and the dropped count they reported.
func (q *queue) commit(n int, dropped int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = q.pending[n:]
	q.dropped -= dropped
}

func (q *queue) total() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.droppedAll
}

func bound(limit int) int {
	if limit > 0 {
		return limit
	}
	return 50000
}

// LineSink writes one batch per Flush as a JSON line (MaxRecords per line).
type LineSink struct {
	Limit int // buffer bound in records; default 50000

	q      queue
	w      io.Writer
	source string
}

// NewLineSink writes batches from source to w.
func NewLineSink(w io.Writer, source string) *LineSink { return &LineSink{w: w, source: source} }

// Add buffers r, or drops it when the buffer is full.
func (s *LineSink) Add(r Record) { s.q.add(r, s.Limit) }

// Flush writes the buffered records; on a write error they stay buffered.
func (s *LineSink) Flush(context.Context) error {
	for {
		recs, dropped := s.q.peek()
		if len(recs) == 0 && dropped == 0 {
			return nil
		}
		b, err := json.Marshal(Batch{Schema: SchemaID, Source: s.source, Dropped: Ptr(dropped), Records: recs})
		if err != nil {
			return fmt.Errorf("%w: encode: %v", ErrTelemetry, err)
		}
		if _, err := s.w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("%w: write: %v", ErrTelemetry, err)
		}
		s.q.commit(len(recs), dropped)
	}
}

// Dropped is the total number of records dropped so far.
func (s *LineSink) Dropped() int64 { return s.q.total() }

// HTTPSink POSTs batches to a manager URL with a bearer token. It holds at
// most Limit records; beyond that it drops the newest and counts them, and
// reports the count in the next batch's "dropped".
type HTTPSink struct {
	URL    string       // manager endpoint
	Token  string       // bearer token ("" = no Authorization header)
	Source string       // agent instance id
	Limit  int          // buffer bound in records; default 50000
	Client *http.Client // default: 10 s timeout

	q queue
}

// Add buffers r, or drops it when the buffer is full.
func (s *HTTPSink) Add(r Record) { s.q.add(r, s.Limit) }

// Flush POSTs up to MaxRecords records; on failure they stay buffered.
func (s *HTTPSink) Flush(ctx context.Context) error {
	recs, dropped := s.q.peek()
	if len(recs) == 0 && dropped == 0 {
		return nil
	}
	if err := s.post(ctx, Batch{Schema: SchemaID, Source: s.Source, Dropped: Ptr(dropped), Records: recs}); err != nil {
		return err
	}
	s.q.commit(len(recs), dropped)
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
func (s *HTTPSink) Dropped() int64 { return s.q.total() }

func (s *HTTPSink) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}
