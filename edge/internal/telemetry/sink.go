package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sink receives records; Flush ships what is buffered.
type Sink interface {
	Add(r Record)
	Flush(ctx context.Context) error
	// Dropped is how many records were lost in total (bounded buffer,
	// invalid records, batches the manager refused).
	Dropped() int64
}

// Defaults of the bounded buffer and the HTTP retry policy.
const (
	DefaultLimit      = 50000    // records buffered
	DefaultLimitBytes = 16 << 20 // estimated encoded bytes buffered
	maxBatchBytes     = 4 << 20  // estimated bytes per POST (the manager takes 16 MiB bodies)
	backoffStart      = 500 * time.Millisecond
	backoffCap        = 30 * time.Second
	retryAfterCap     = 5 * time.Minute
	maxBatchesPerCall = 16
)

// queue is the bounded record buffer both sinks share: beyond the bound
// (records or estimated bytes) it drops the newest records and counts
// them, and the count travels in the next shipped batch's "dropped".
// Records that break the schema are dropped and counted too: the manager
// would refuse the batch that carries them.
type queue struct {
	mu         sync.Mutex
	pending    []Record
	sizes      []int // estimated encoded size of each pending record
	bytes      int   // sum of sizes
	dropped    int64 // since the last shipped batch
	droppedAll int64
	invalid    int64
	lastBad    string
	sent       int64 // records shipped (written or accepted by the manager)
	held       int   // records taken into batches not yet acknowledged (BusSink)
	heldBytes  int   // their estimated size
}

func (q *queue) add(r Record, limit, limitBytes int) {
	if err := r.Validate(); err != nil {
		q.mu.Lock()
		q.dropped++
		q.droppedAll++
		q.invalid++
		q.lastBad = err.Error()
		q.mu.Unlock()
		return
	}
	size := EncodedSize(&r)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending)+q.held >= orDefault(limit, DefaultLimit) || q.bytes+q.heldBytes+size > orDefault(limitBytes, DefaultLimitBytes) {
		q.dropped++
		q.droppedAll++
		return
	}
	q.pending = append(q.pending, r)
	q.sizes = append(q.sizes, size)
	q.bytes += size
}

// peek copies the next batch (at most MaxRecords records and about
// maxBatchBytes) and the drops not yet reported.
func (q *queue) peek() ([]Record, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, size := 0, 0
	for n < len(q.pending) && n < MaxRecords && (n == 0 || size+q.sizes[n] <= maxBatchBytes) {
		size += q.sizes[n]
		n++
	}
	// never nil: a batch that only reports drops carries "records": [] (null is refused by the manager's schema)
	return append([]Record{}, q.pending[:n]...), min(q.dropped, MaxSafeInt)
}

// commit forgets n shipped records and the dropped count they reported.
func (q *queue) commit(n int, dropped int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range q.sizes[:n] {
		q.bytes -= s
	}
	clear(q.pending[:n]) // release the strings
	q.pending, q.sizes = q.pending[n:], q.sizes[n:]
	q.sent += int64(n)
	if len(q.pending) == 0 { // let the backing arrays go
		q.pending, q.sizes = nil, nil
	}
	q.dropped -= dropped
}

// discard forgets n records the manager refused for good and counts them
// as dropped (reported in the next batch).
func (q *queue) discard(n int) {
	q.commit(n, 0)
	q.mu.Lock()
	q.sent -= int64(n)
	q.dropped += int64(n)
	q.droppedAll += int64(n)
	q.mu.Unlock()
}

func (q *queue) total() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.droppedAll
}

// QueueStats is a snapshot of a sink's buffer.
type QueueStats struct {
	Pending        int    // records buffered
	PendingBytes   int    // their estimated encoded size
	Dropped        int64  // records lost in total (any reason)
	Invalid        int64  // of which: records that broke the schema
	LastInvalid    string // the last such record's error
	Refused        int64  // of which: records in batches the manager or the bus refused for good
	BusFull        int64  // publishes the bus's full stream refused (BusSink; the batch stayed buffered, retried)
	BusUnavailable int64  // publishes refused with another 503 (BusSink: JetStream unavailable; kept, retried)
	Sent           int64  // records shipped: written (LineSink) or accepted by the manager (HTTPSink)
}

func (q *queue) stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueStats{Pending: len(q.pending) + q.held, PendingBytes: q.bytes + q.heldBytes, Dropped: q.droppedAll, Invalid: q.invalid, LastInvalid: q.lastBad, Sent: q.sent}
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// EncodedSize estimates the JSON size of r in a batch: the strings, their
// keys and quotes, and a fixed allowance for each number and boolean.
func EncodedSize(r *Record) int {
	n := 80 // braces, time, kind, table_version
	for _, s := range [...]string{r.ClientPrefix, r.ClientAddr, r.Group, r.ConfigID, r.CongestionControl, r.ALPN, r.SNI, r.TLSFingerprint, r.Device, r.Region} {
		if s != "" {
			n += len(s) + 24
		}
	}
	for _, p := range [...]*float64{r.Probability, r.SrttMs, r.MinRttMs, r.MaxDeliveryRate, r.DurationMs, r.HandshakeRttMs, r.TTFBMs, r.TTLBMs, r.PLTMs} {
		if p != nil {
			n += 40
		}
	}
	for _, p := range [...]*int64{r.BytesSent, r.BytesAcked, r.BytesRetrans, r.Retransmits, r.Delivered, r.Cwnd, r.MSS, r.ObjectBytes, r.ASN} {
		if p != nil {
			n += 36
		}
	}
	if r.Holdback != nil {
		n += 18
	}
	return n
}

// LineSink writes one batch per Flush as a JSON line (MaxRecords per line).
type LineSink struct {
	Limit      int // buffer bound in records; default 50000
	LimitBytes int // buffer bound in estimated bytes; default 16 MiB

	q      queue
	w      io.Writer
	source string
}

// NewLineSink writes batches from source to w.
func NewLineSink(w io.Writer, source string) *LineSink { return &LineSink{w: w, source: source} }

// Add buffers r, or drops it when the buffer is full or r is invalid.
func (s *LineSink) Add(r Record) { s.q.add(r, s.Limit, s.LimitBytes) }

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

// Stats is a snapshot of the buffer.
func (s *LineSink) Stats() QueueStats { return s.q.stats() }

// HTTPSink POSTs batches to a manager URL with a bearer token. Its buffer
// holds at most Limit records and LimitBytes (estimated encoded) bytes;
// beyond that it drops the newest and reports the count in the next
// batch's "dropped". Per answer:
//   - 2xx: delivered;
//   - 401, 403: kept and retried with backoff, logged at every attempt
//     (a credential problem the operator must fix);
//   - 408, 429, 5xx, network errors: kept and retried with exponential
//     backoff (0.5 s doubling to 30 s, jittered; Retry-After honoured);
//   - any other status (400, 413, 422, 3xx...): the batch will never be
//     accepted, so it is dropped and counted, and the buffer moves on.
//
// Flush does nothing while a backoff is pending (except on a context made
// with Final, for the last flush at shutdown).
type HTTPSink struct {
	URL        string       // manager endpoint
	Token      string       // bearer token ("" = no Authorization header)
	Source     string       // agent instance id
	Limit      int          // buffer bound in records; default 50000
	LimitBytes int          // buffer bound in estimated encoded bytes; default 16 MiB
	Client     *http.Client // default: 10 s timeout
	Log        *log.Logger  // refusals and credential errors; default log.Default()

	q queue

	mu       sync.Mutex // serialises Flush; guards the fields below
	failures int        // consecutive retryable failures
	next     time.Time  // no attempt before this

	refused atomic.Int64 // records dropped because the manager refused their batch
}

// Add buffers r, or drops it when the buffer is full or r is invalid.
func (s *HTTPSink) Add(r Record) { s.q.add(r, s.Limit, s.LimitBytes) }

type finalKey struct{}

// Final marks ctx for a last flush that ignores a pending backoff (shutdown).
func Final(ctx context.Context) context.Context { return context.WithValue(ctx, finalKey{}, true) }

// FinalTimeout bounds the last flush at shutdown (its retries included).
const FinalTimeout = 10 * time.Second

// FlushFinal is the last flush at shutdown: parent's values without its
// cancellation, marked Final, bounded by FinalTimeout. Records a sink still
// holds after it are lost with the process, so it says how many, also for a
// sink whose Flush keeps quiet while its destination is away (BusSink).
func FlushFinal(parent context.Context, sink Sink) error {
	ctx, cancel := context.WithTimeout(Final(context.WithoutCancel(parent)), FinalTimeout)
	defer cancel()
	err := sink.Flush(ctx)
	if st, ok := sink.(interface{ Stats() QueueStats }); ok && err == nil {
		if n := st.Stats().Pending; n > 0 {
			err = undelivered(ErrTelemetry, n)
		}
	}
	return err
}

// undelivered is the last flush's error when n records stay buffered.
func undelivered(cause error, n int) error {
	return fmt.Errorf("%w: %d records not delivered at shutdown", cause, n)
}

// errRetry is a retryable failure; wait is the server's Retry-After (0 = none).
type errRetry struct {
	err        error
	wait       time.Duration
	credential bool // 401/403: the operator must act; a quick retry cannot help
}

func (e *errRetry) Error() string { return e.err.Error() }
func (e *errRetry) Unwrap() error { return e.err }

// errRefused: the manager answered a status that will not change on resend.
var errRefused = errors.New("refused")

// Flush POSTs the buffered records (up to 16 batches of MaxRecords). On a
// retryable failure they stay buffered and a backoff starts; a refused
// batch is dropped (counted) and the error returned.
//
// The last flush at shutdown (a context made with Final) ships the whole
// buffer, not 16 batches, and retries a transient failure (network, 408,
// 429, 5xx; at most 1 s apart) until ctx ends: a transient error at that moment (the manager
// closing an idle keep-alive connection as the POST goes out) must not
// lose the records; its error then says how many records stay undelivered.
func (s *HTTPSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	final := ctx.Value(finalKey{}) != nil
	if !final && time.Now().Before(s.next) {
		return nil
	}
	var firstErr error
	for i := 0; final || i < maxBatchesPerCall; i++ {
		recs, dropped := s.q.peek()
		if len(recs) == 0 && dropped == 0 {
			break
		}
		err := s.post(ctx, Batch{Schema: SchemaID, Source: s.Source, Dropped: Ptr(dropped), Records: recs})
		var retry *errRetry
		switch {
		case err == nil:
			s.q.commit(len(recs), dropped)
			s.failures, s.next = 0, time.Time{}
			continue
		case errors.As(err, &retry):
			s.failures++
			s.next = time.Now().Add(max(backoff(s.failures), min(retry.wait, retryAfterCap)))
			if final && !retry.credential && sleepCtx(ctx, min(backoff(s.failures), time.Second)) {
				continue // the same batch again
			}
			if final {
				return errors.Join(firstErr, undelivered(err, s.q.stats().Pending))
			}
			return errors.Join(firstErr, fmt.Errorf("%w (retry in %v, %d records buffered)", err, time.Until(s.next).Round(time.Millisecond), s.q.stats().Pending))
		default: // refused for good: drop the batch, go on with the next
			if firstErr == nil {
				firstErr = err
			}
			if len(recs) == 0 { // only a drop count, refused: resending it would be refused again
				s.q.commit(0, dropped)
				s.logf("telemetry: %v: the count of %d dropped records not delivered", err, dropped)
				return firstErr
			}
			s.q.discard(len(recs))
			s.refused.Add(int64(len(recs)))
			s.logf("telemetry: %v: dropped %d records", err, len(recs))
		}
	}
	return firstErr
}

// sleepCtx waits d unless ctx ends first; it reports whether ctx is
// still live after the wait.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}

// backoff is the n-th (n >= 1) retry delay: 0.5 s doubling up to 30 s,
// with "equal jitter" (half fixed, half random) so edges that failed
// together do not retry together.
func backoff(n int) time.Duration {
	d := backoffStart << min(n-1, 10)
	d = min(d, backoffCap)
	return d/2 + rand.N(d/2+1)
}

func (s *HTTPSink) post(ctx context.Context, b Batch) error {
	body, err := json.Marshal(b)
	if err != nil { // cannot happen: every record passed Validate
		return fmt.Errorf("%w: encode: %v: %w", ErrTelemetry, err, errRefused)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v: %w", ErrTelemetry, err, errRefused)
	}
	req.Header.Set("Content-Type", "application/json")
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return &errRetry{err: fmt.Errorf("%w: post: %v", ErrTelemetry, err)}
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	code := resp.StatusCode
	switch {
	case code/100 == 2:
		return nil
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		err := fmt.Errorf("%w: post %s: %s: the manager refuses the credential (check TAILOR_TOKEN); records kept", ErrTelemetry, s.URL, resp.Status)
		s.logf("%v", err) // loud: every attempt, with backoff
		return &errRetry{err: err, credential: true}
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code/100 == 5:
		return &errRetry{err: fmt.Errorf("%w: post %s: %s", ErrTelemetry, s.URL, resp.Status), wait: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return fmt.Errorf("%w: post %s: %s %q: %w", ErrTelemetry, s.URL, resp.Status, bytes.TrimSpace(msg), errRefused)
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(min(n, int(retryAfterCap/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// Dropped is the total number of records dropped so far.
func (s *HTTPSink) Dropped() int64 { return s.q.total() }

// Stats is a snapshot of the buffer and of the refusals.
func (s *HTTPSink) Stats() QueueStats {
	st := s.q.stats()
	st.Refused = s.refused.Load()
	return st
}

func (s *HTTPSink) logf(format string, args ...any) {
	l := s.Log
	if l == nil {
		l = log.Default()
	}
	l.Printf(format, args...)
}

func (s *HTTPSink) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}
