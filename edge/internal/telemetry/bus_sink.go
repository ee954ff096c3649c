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
// store, e.g. a cluster without its leader; or no stream answers the
// subject: nats.go's ErrNoStreamResponse, the stream not created yet or set
// up for another partition count). Kept and retried as a full stream,
// counted apart (Stats().BusUnavailable).
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
// document yet) records wait. A formed batch whose partition count is no
// longer the cluster's (the cluster document changed P) is re-formed for
// the current one before it is published again: its records re-partitioned
// into new batches (new message ids), or, if its message cannot be read
// back (it cannot happen), dropped and counted. Until 2026-12-07 such a
// batch kept its subject: after P went down the stream refused it (no
// stream answers), and it was retried forever ahead of every other batch,
// counted nowhere (found by review).
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
	parts       int   // the partition count it was formed for
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

// Flush re-forms the formed batches of another partition count (reform;
// P is read again before every publish), publishes the formed batches still
// unacknowledged, then forms batches from the buffer and publishes them. While the bus is away or its
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
		// P again before every publish: the cluster document may change during
		// a flush (until 2026-12-07 P was read only at its start, and up to a
		// flush's batches went out formed for the old P: found by review)
		if err := s.reform(s.partitions()); err != nil {
			return errors.Join(refused, err)
		}
		if len(s.formed) == 0 { // (a stale batch that could not be re-formed, dropped and counted)
			break
		}
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

func (s *BusSink) partitions() int {
	if s.Partitions == nil {
		return 0
	}
	return s.Partitions()
}

// form takes the buffered records into batches grouped by partition
// (bounded: MaxRecords per batch, about min(4 MiB, the server's limit)).
func (s *BusSink) form() error {
	P := s.partitions()
	if P <= 0 {
		return nil
	}
	recs, sizes, dropped := s.q.take(maxBatchesPerFlush * MaxRecords)
	return s.group(P, recs, sizes, dropped)
}

// reform re-forms the formed batches of another partition count than P
// (the cluster document changed P since they were formed): their records
// go into new batches for P (ahead of the batches formed for P), the drop
// counts they carried with them. Their old subjects are wrong: a partition
// the stream no longer stores (refused: no stream answers), or one whose
// shard refuses the records of other partitions. A batch whose message
// cannot be decoded (it cannot happen: this sink encoded it) is dropped
// and counted. With P unknown (0) nothing changes.
func (s *BusSink) reform(P int) error {
	if P <= 0 {
		return nil
	}
	var kept, stale []*busBatch
	for _, b := range s.formed {
		if b.parts == P {
			kept = append(kept, b)
		} else {
			stale = append(stale, b)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	var recs []Record
	var sizes []int
	var dropped int64
	lost, was := 0, stale[0].parts
	for _, b := range stale {
		var batch Batch
		err := json.Unmarshal(b.data, &batch)
		if err == nil && len(batch.Records) != b.n {
			err = fmt.Errorf("%d records, formed with %d", len(batch.Records), b.n)
		}
		if err != nil {
			s.q.ackedDropped(b.n, b.bytes, b.dropped)
			lost += b.n
			s.logf("telemetry: batch %s cannot be re-formed (%v): dropped %d records", b.id, err, b.n)
			continue
		}
		dropped += b.dropped
		// the queue's estimates again; the batch's total is kept exact (it
		// goes back to the queue's held bytes with the acknowledgement)
		sum := 0
		for i := range batch.Records {
			sz := EncodedSize(&batch.Records[i])
			sizes = append(sizes, sz)
			sum += sz
		}
		if len(batch.Records) > 0 {
			sizes[len(sizes)-1] += b.bytes - sum
		}
		recs = append(recs, batch.Records...)
	}
	s.formed = nil
	err := s.group(P, recs, sizes, dropped)
	s.formed = append(s.formed, kept...)
	s.logf("telemetry: the cluster has %d partitions (was %d): %d records of %d unacknowledged batches re-formed, %d dropped",
		P, was, len(recs), len(stale), lost)
	return err
}

// group forms batches for P from recs (with their estimated sizes) and
// the drop count to report (a batch of only that count when recs is empty).
func (s *BusSink) group(P int, recs []Record, sizes []int, dropped int64) error {
	if len(recs) == 0 && dropped == 0 {
		return nil
	}
	limitBytes := min(maxBatchBytes, s.messageLimit()*3/4)
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
			if err := s.add(p, P, chunk, size, &dropped); err != nil {
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
func (s *BusSink) add(p, P int, recs []Record, size int, dropped *int64) error {
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
		if err := s.add(p, P, recs[:half], hs, dropped); err != nil {
			return err
		}
		return s.add(p, P, recs[half:], size-hs, dropped)
	}
	*dropped = 0 // reported by this batch
	s.seq++
	s.formed = append(s.formed, &busBatch{subject: "tailor.tel." + s.Pop + "." + strconv.Itoa(p),
		id: s.Source + "/" + s.Nonce + "/" + strconv.FormatUint(s.seq, 10), data: data, n: len(recs), bytes: size, dropped: d, parts: P})
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
