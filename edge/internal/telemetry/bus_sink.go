package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
)

// ErrPublishRefused: the bus refused a batch for good (a JetStream API
// error such as a message over the size limit); it is dropped and counted.
var ErrPublishRefused = errors.New("telemetry batch refused by the bus")

// ErrBusFull: the bus cannot store the batch now (its stream is full:
// TAILOR_TELEMETRY refuses publishes rather than deleting stored messages;
// or its storage is exhausted). The batch stays buffered and is published
// again at the next Flush; the buffer's bound drops and counts what does
// not fit meanwhile.
var ErrBusFull = errors.New("bus stream full")

// ErrBusUnavailable: JetStream cannot answer now (a 503 that is not a full
// store, e.g. a cluster without its leader). Kept and retried as a full
// stream, counted apart (Stats().BusUnavailable).
var ErrBusUnavailable = errors.New("bus JetStream unavailable")

// Publisher is what BusSink needs of the bus (bus.Publisher): publish with
// a Nats-Msg-Id header and return once JetStream acknowledged the message.
type Publisher interface {
	Publish(ctx context.Context, subject, msgID string, data []byte) error
	MaxPayload() int64 // the server's message limit (0 = not known yet)
}

// BusSink publishes telemetry to the bus (docs/bus.md): a flush groups the
// buffer by partition and publishes one batch per partition chunk to
// tailor.tel.<Pop>.<partition> with Nats-Msg-Id <Source>/<Nonce>/<seq>.
// Records count against the bound until JetStream acknowledged their
// batch; a batch whose publish failed (bus away, stream full) is
// re-published with the same message id (the stream's duplicate window
// drops a second copy). While the partition count is unknown (no cluster
// document yet) records wait.
type BusSink struct {
	Pub         Publisher
	Pop         string                         // --pop
	Source      string                         // instance id
	Nonce       string                         // boot nonce; default: 16 random hex digits
	Partitions  func() int                     // P (0 = not known yet)
	PartitionOf func(prefix string, P int) int // bus.Partition
	Limit       int                            // buffer bound in records; default 50000
	LimitBytes  int                            // buffer bound in estimated bytes; default 16 MiB
	Log         *log.Logger                    // default log.Default()

	q queue

	mu     sync.Mutex // serialises Flush; guards the fields below
	seq    uint64
	formed []*busBatch // formed, not yet acknowledged, in order
	away   bool        // the last publish failed (logged once)

	batches atomic.Int64 // batches acknowledged
	refused atomic.Int64 // records in batches refused for good
	full    atomic.Int64 // publishes refused because the stream was full (batch kept)
	unavail atomic.Int64 // publishes refused because JetStream was unavailable (batch kept)
}

type busBatch struct {
	subject, id string
	data        []byte
	n, bytes    int
	dropped     int64 // the drop count it reports
}

// Add buffers r, or drops it when the buffer is full or r is invalid.
func (s *BusSink) Add(r Record) { s.q.add(r, s.Limit, s.LimitBytes) }

// Dropped is the total number of records dropped so far.
func (s *BusSink) Dropped() int64 { return s.q.total() }

// Stats is a snapshot of the buffer (Pending includes the records of
// batches not acknowledged yet).
func (s *BusSink) Stats() QueueStats {
	st := s.q.stats()
	st.Refused = s.refused.Load()
	st.BusFull = s.full.Load()
	st.BusUnavailable = s.unavail.Load()
	return st
}

// Batches is the number of batches JetStream acknowledged.
func (s *BusSink) Batches() int64 { return s.batches.Load() }

func (s *BusSink) logf(format string, args ...any) {
	l := s.Log
	if l == nil {
		l = log.Default()
	}
	l.Printf(format, args...)
}

// maxBatchesPerFlush bounds the batches formed and published by one Flush.
const maxBatchesPerFlush = 64

// MaxMessageBytes is the stream's max message size (docs/bus.md:
// TAILOR_TELEMETRY, 4 MiB); a message also stays under the server's
// max_payload. 1 KiB is left for the headers.
const MaxMessageBytes = 4 << 20

// messageLimit is the largest encoded batch to publish.
func (s *BusSink) messageLimit() int {
	limit := MaxMessageBytes
	if mp := s.Pub.MaxPayload(); mp > 0 {
		limit = min(limit, int(mp))
	}
	return limit - 1024
}

// Flush publishes the formed batches still unacknowledged, then forms
// batches from the buffer and publishes them. While the bus is away or its
// stream full it returns nil (the records stay; the first failure is
// logged, a full stream's refusals counted in Stats().BusFull, an
// unavailable JetStream's in Stats().BusUnavailable); a batch the
// bus refused for good is dropped, counted, and its error returned.
func (s *BusSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Nonce == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.Nonce = hex.EncodeToString(b[:])
	}
	if len(s.formed) == 0 {
		if err := s.form(); err != nil {
			return err
		}
	}
	var refused error
	for sent := 0; len(s.formed) > 0 && sent < maxBatchesPerFlush; sent++ {
		b := s.formed[0]
		err := s.Pub.Publish(ctx, b.subject, b.id, b.data)
		switch {
		case err == nil:
			s.q.acked(b.n, b.bytes)
			s.batches.Add(1)
			if s.away {
				s.away = false
				s.logf("telemetry: bus publishing again")
			}
		case errors.Is(err, ErrPublishRefused):
			// dropped and counted; the drops it carried go to a later batch
			s.q.ackedDropped(b.n, b.bytes, b.dropped)
			s.refused.Add(int64(b.n))
			s.logf("telemetry: %v: dropped %d records", err, b.n)
			refused = errors.Join(refused, fmt.Errorf("%w: %v", ErrTelemetry, err))
		default:
			switch {
			case errors.Is(err, ErrBusFull):
				s.full.Add(1)
			case errors.Is(err, ErrBusUnavailable):
				s.unavail.Add(1)
			}
			if !s.away {
				s.away = true
				s.logf("telemetry: bus publish: %v (records stay buffered: %d)", err, s.q.stats().Pending)
			}
			return refused
		}
		s.formed = s.formed[1:]
		if len(s.formed) == 0 {
			s.formed = nil
			if refused != nil {
				break // the next Flush goes on (a refusal never loops here)
			}
			if err := s.form(); err != nil {
				return err
			}
		}
	}
	return refused
}

// form takes the buffered records into batches grouped by partition
// (bounded: MaxRecords per batch, about min(4 MiB, the server's limit)).
func (s *BusSink) form() error {
	P := 0
	if s.Partitions != nil {
		P = s.Partitions()
	}
	if P <= 0 {
		return nil
	}
	limitBytes := min(maxBatchBytes, s.messageLimit()*3/4)
	recs, sizes, dropped := s.q.take(maxBatchesPerFlush * MaxRecords)
	if len(recs) == 0 && dropped == 0 {
		return nil
	}
	byPart := map[int][]int{}
	var order []int
	for i := range recs {
		p := s.PartitionOf(recs[i].ClientPrefix, P)
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], i)
	}
	if len(recs) == 0 { // only a drop count to report
		order, byPart[0] = []int{0}, nil
	}
	for _, p := range order {
		idx := byPart[p]
		for start := 0; start < len(idx) || (start == 0 && len(idx) == 0); {
			end, size := start, 0
			for end < len(idx) && end-start < MaxRecords && (end == start || size+sizes[idx[end]] <= limitBytes) {
				size += sizes[idx[end]]
				end++
			}
			chunk := make([]Record, 0, end-start)
			for _, i := range idx[start:end] {
				chunk = append(chunk, recs[i])
			}
			if err := s.add(p, chunk, size, &dropped); err != nil {
				return err
			}
			if end == start {
				break
			}
			start = end
		}
	}
	return nil
}

// add encodes one batch (splitting it when its encoding exceeds the
// message limit) and appends it to formed.
func (s *BusSink) add(p int, recs []Record, size int, dropped *int64) error {
	b := Batch{Schema: SchemaID, Source: s.Source, Records: recs}
	if b.Records == nil {
		b.Records = []Record{}
	}
	d := *dropped
	b.Dropped = Ptr(d)
	data, err := json.Marshal(b)
	if err != nil { // cannot happen: every record passed Validate
		return fmt.Errorf("%w: encode: %v", ErrTelemetry, err)
	}
	if len(data) > s.messageLimit() && len(recs) > 1 {
		half := len(recs) / 2
		hs := size * half / len(recs)
		if err := s.add(p, recs[:half], hs, dropped); err != nil {
			return err
		}
		return s.add(p, recs[half:], size-hs, dropped)
	}
	*dropped = 0 // reported by this batch
	s.seq++
	s.formed = append(s.formed, &busBatch{subject: "tailor.tel." + s.Pop + "." + strconv.Itoa(p),
		id: s.Source + "/" + s.Nonce + "/" + strconv.FormatUint(s.seq, 10), data: data, n: len(recs), bytes: size, dropped: d})
	return nil
}

// take moves up to max pending records into held (still counted against
// the bound) and returns them with their sizes and the drops to report.
func (q *queue) take(max int) ([]Record, []int, int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.pending), max)
	recs := append([]Record(nil), q.pending[:n]...)
	sizes := append([]int(nil), q.sizes[:n]...)
	for _, sz := range sizes {
		q.bytes -= sz
		q.heldBytes += sz
	}
	q.held += n
	clear(q.pending[:n])
	q.pending, q.sizes = q.pending[n:], q.sizes[n:]
	if len(q.pending) == 0 {
		q.pending, q.sizes = nil, nil
	}
	d := min(q.dropped, MaxSafeInt)
	q.dropped -= d
	return recs, sizes, d
}

// acked forgets n held records their batch delivered.
func (q *queue) acked(n, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held -= n
	q.heldBytes -= bytes
	q.sent += int64(n)
}

// ackedDropped forgets n held records whose batch was refused for good
// (counted as dropped) and gives back the drop count the batch carried:
// both are reported in the next batch.
func (q *queue) ackedDropped(n, bytes int, reported int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held -= n
	q.heldBytes -= bytes
	q.dropped += int64(n) + reported
	q.droppedAll += int64(n)
}
