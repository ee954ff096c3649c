package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// manager is a fake telemetry endpoint answering codes[i] to the i-th POST
// (the last code afterwards) and keeping the batches it accepted.
type manager struct {
	mu       sync.Mutex
	codes    []int
	header   http.Header
	posts    int
	accepted []Batch
}

func (m *manager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	code := m.codes[min(m.posts, len(m.codes)-1)]
	m.posts++
	var b Batch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Validate() != nil {
		code = http.StatusBadRequest
	}
	for k, v := range m.header {
		w.Header()[k] = v
	}
	if code == http.StatusAccepted {
		m.accepted = append(m.accepted, b)
	}
	w.WriteHeader(code)
}

func (m *manager) snapshot() (posts int, accepted []Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.posts, append([]Batch(nil), m.accepted...)
}

func quietSink(url string) (*HTTPSink, *bytes.Buffer) {
	var logBuf bytes.Buffer
	return &HTTPSink{URL: url, Source: "edge-t", Log: log.New(&logBuf, "", 0)}, &logBuf
}

// TestHTTPSinkRefusedBatchIsDropped: a 400 is final: the batch is dropped
// and counted, the next records are delivered, and the next batch reports
// the drop in "dropped" (no wedge on a poisoned batch).
func TestHTTPSinkRefusedBatchIsDropped(t *testing.T) {
	m := &manager{codes: []int{http.StatusBadRequest, http.StatusAccepted}}
	srv := httptest.NewServer(m)
	defer srv.Close()
	s, logs := quietSink(srv.URL)
	s.Add(connRecord())
	s.Add(connRecord())
	if err := s.Flush(context.Background()); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("flush answered 400: err %v", err)
	}
	if s.Dropped() != 2 || s.Stats().Refused != 2 || s.Stats().Pending != 0 {
		t.Fatalf("after 400: Dropped %d, stats %+v; want 2 dropped, none pending", s.Dropped(), s.Stats())
	}
	s.Add(connRecord())
	if err := s.Flush(context.Background()); err != nil { // no backoff after a refusal
		t.Fatal(err)
	}
	_, acc := m.snapshot()
	var recs, dropped int64
	for _, b := range acc {
		recs += int64(len(b.Records))
		dropped += *b.Dropped
	}
	if recs != 1 || dropped != 2 {
		t.Fatalf("accepted %d records with dropped=%d reported, want the later record and dropped=2", recs, dropped)
	}
	if !strings.Contains(logs.String(), "dropped 2 records") {
		t.Errorf("refusal not logged: %q", logs.String())
	}
}

// TestHTTPSinkRetries503WithBackoff: a 503 keeps the records; the next
// flush inside the backoff sends nothing; after it the batch is delivered.
// Retry-After stretches the backoff.
func TestHTTPSinkRetries503WithBackoff(t *testing.T) {
	m := &manager{codes: []int{http.StatusServiceUnavailable, http.StatusAccepted}}
	srv := httptest.NewServer(m)
	defer srv.Close()
	s, _ := quietSink(srv.URL)
	s.Add(connRecord())
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("503 must be reported")
	}
	if d := time.Until(s.next); d < 200*time.Millisecond || d > 600*time.Millisecond {
		t.Errorf("first backoff %v, want 0.25-0.5 s", d)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts, _ := m.snapshot(); posts != 1 {
		t.Fatalf("%d posts during the backoff, want 1", posts)
	}
	time.Sleep(time.Until(s.next) + 10*time.Millisecond)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts, acc := m.snapshot(); posts != 2 || len(acc) != 1 || len(acc[0].Records) != 1 || *acc[0].Dropped != 0 {
		t.Fatalf("posts %d accepted %+v: want the retried batch delivered, nothing dropped", posts, acc)
	}

	// Retry-After and 429
	m2 := &manager{codes: []int{http.StatusTooManyRequests}, header: http.Header{"Retry-After": {"3"}}}
	srv2 := httptest.NewServer(m2)
	defer srv2.Close()
	s2, _ := quietSink(srv2.URL)
	s2.Add(connRecord())
	_ = s2.Flush(context.Background())
	if d := time.Until(s2.next); d < 2500*time.Millisecond || d > 3*time.Second {
		t.Errorf("backoff after Retry-After: 3 is %v", d)
	}
	if s2.Stats().Pending != 1 || s2.Dropped() != 0 {
		t.Errorf("429 must keep the record: %+v", s2.Stats())
	}
}

// TestHTTPSinkCredentialErrorIsKeptAndLogged: 401/403 are retried, never
// dropped, and logged.
func TestHTTPSinkCredentialErrorIsKeptAndLogged(t *testing.T) {
	m := &manager{codes: []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusAccepted}}
	srv := httptest.NewServer(m)
	defer srv.Close()
	s, logs := quietSink(srv.URL)
	s.Add(connRecord())
	for range 2 {
		if err := s.Flush(Final(context.Background())); err == nil {
			t.Fatal("401/403 must be reported")
		}
	}
	if s.Dropped() != 0 || strings.Count(logs.String(), "refuses the credential") != 2 {
		t.Fatalf("dropped %d, log %q", s.Dropped(), logs.String())
	}
	if err := s.Flush(Final(context.Background())); err != nil {
		t.Fatal(err)
	}
	if _, acc := m.snapshot(); len(acc) != 1 {
		t.Fatalf("accepted %d batches", len(acc))
	}
}

func bigRecord() Record {
	r := connRecord()
	r.Group = strings.Repeat("g", 200)
	r.TLSFingerprint = strings.Repeat("f", 128)
	r.ALPN = strings.Repeat("a", 255)
	r.Device = strings.Repeat("d", 64)
	r.SNI = strings.Repeat("s", 253)
	return r
}

// TestSinkByteBound: with large records the buffer stops at LimitBytes
// (estimated), counts the rest as dropped, and the estimate is close to
// the real encoding.
func TestSinkByteBound(t *testing.T) {
	s := &HTTPSink{URL: "http://127.0.0.1:1/", Source: "e", LimitBytes: 20000}
	for range 100 {
		s.Add(bigRecord())
	}
	st := s.Stats()
	if st.PendingBytes > 20000 || st.Pending == 0 || st.Pending+int(st.Dropped) != 100 {
		t.Fatalf("stats %+v: want <= 20000 bytes buffered and the rest dropped", st)
	}
	r := bigRecord()
	enc, _ := json.Marshal(r)
	if est := EncodedSize(&r); est < len(enc) || est > 2*len(enc) {
		t.Errorf("estimate %d for an encoding of %d bytes", est, len(enc))
	}
	small := connRecord()
	enc, _ = json.Marshal(small)
	if est := EncodedSize(&small); est < len(enc) || est > 2*len(enc) {
		t.Errorf("estimate %d for an encoding of %d bytes", est, len(enc))
	}
}

// TestSinkDropsInvalidRecords: a record the manager would refuse never
// enters the buffer (it would poison its whole batch).
func TestSinkDropsInvalidRecords(t *testing.T) {
	var buf bytes.Buffer
	s := NewLineSink(&buf, "e")
	bad := connRecord()
	bad.SNI = "evil\nname"
	s.Add(bad)
	s.Add(connRecord())
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := json.Unmarshal(buf.Bytes(), &b); err != nil || len(b.Records) != 1 || *b.Dropped != 1 {
		t.Fatalf("batch %s: %v", buf.String(), err)
	}
	if st := s.Stats(); st.Invalid != 1 || !strings.Contains(st.LastInvalid, "records[0].sni") {
		t.Fatalf("stats %+v", st)
	}
}

// TestFinalFlushRetriesTransientFailures: at shutdown there is no later
// flush, so the last one retries a connection cut by the server and a 503
// until the batch is delivered (more than the 16 batches of an ordinary
// flush), and when the manager stays away it gives up when its context ends
// and says how many records were not delivered.
func TestFinalFlushRetriesTransientFailures(t *testing.T) {
	m := &manager{codes: []int{http.StatusServiceUnavailable, http.StatusAccepted}}
	var cut sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		cut.Do(func() { first = true })
		if first { // the manager closing the connection as the POST arrives
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close()
			}
			return
		}
		m.ServeHTTP(w, r)
	}))
	defer srv.Close()
	s, _ := quietSink(srv.URL)
	n := 17*MaxRecords + 3
	s.Limit, s.LimitBytes = n, 1<<30
	for range n {
		s.Add(connRecord())
	}
	// Final without a deadline: what is tested here is that the retries and
	// the batches go on to the end, not how fast 170,003 records travel (a
	// loaded CI machine took 12 s, past FinalTimeout; FlushFinal's own bound
	// is the second half of this test and TestFlushFinalCountsWhatStays).
	if err := s.Flush(Final(context.Background())); err != nil {
		t.Fatalf("final flush: %v", err)
	}
	if st := s.Stats(); st.Pending != 0 || st.Sent != int64(n) || st.Dropped != 0 {
		t.Fatalf("after the final flush: %+v, want all %d sent", st, n)
	}
	_, acc := m.snapshot()
	got := 0
	for _, b := range acc {
		got += len(b.Records)
	}
	if got != n {
		t.Fatalf("the manager accepted %d records, want %d", got, n)
	}

	down := &manager{codes: []int{http.StatusServiceUnavailable}}
	srv2 := httptest.NewServer(down)
	defer srv2.Close()
	s2, _ := quietSink(srv2.URL)
	s2.Add(connRecord())
	ctx, cancel := context.WithTimeout(Final(context.Background()), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s2.Flush(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 records not delivered at shutdown") {
		t.Fatalf("err %v: want the undelivered count", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("the final flush took %v past its 1.5 s context", el)
	}
	if posts, _ := down.snapshot(); posts < 2 {
		t.Fatalf("%d posts: the final flush must retry", posts)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestFlushFinalCountsWhatStays: whatever a sink still holds after the last
// flush is named with its count, also when the sink's Flush itself reports
// nothing (the error of a LineSink's writer is reported; a sink that holds
// records without an error gets the count from its Stats).
func TestFlushFinalCountsWhatStays(t *testing.T) {
	ls := NewLineSink(failingWriter{}, "edge-t")
	ls.Add(connRecord())
	ls.Add(connRecord())
	if err := FlushFinal(context.Background(), ls); err == nil || !strings.Contains(err.Error(), "write") {
		t.Fatalf("err %v: want the writer's error", err)
	}
	quiet := &silentSink{LineSink: NewLineSink(failingWriter{}, "edge-t")}
	quiet.Add(connRecord())
	err := FlushFinal(context.Background(), quiet)
	if err == nil || !strings.Contains(err.Error(), "1 records not delivered at shutdown") {
		t.Fatalf("err %v: want the count of what stays", err)
	}
	ok := NewLineSink(io.Discard, "edge-t")
	ok.Add(connRecord())
	if err := FlushFinal(context.Background(), ok); err != nil {
		t.Fatalf("a delivered buffer: %v", err)
	}
}

// silentSink keeps its records and reports no error, as BusSink does while the
// bus is away.
type silentSink struct{ *LineSink }

func (q *silentSink) Flush(context.Context) error { return nil }

// TestDropCountAloneIsAValidBatch: after a drop with nothing else buffered
// the next batch carries the count with "records": [] (until 2026-12-07 it
// sent "records": null, which the manager refuses: the count never arrived
// and every flush re-posted it 16 times; found by review), and a batch of
// only a count that the manager refuses for good is not posted again.
func TestDropCountAloneIsAValidBatch(t *testing.T) {
	m := &manager{codes: []int{http.StatusAccepted}}
	srv := httptest.NewServer(m)
	defer srv.Close()
	s, _ := quietSink(srv.URL)
	bad := connRecord()
	bad.SNI = "evil\nname"
	s.Add(bad)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	posts, accepted := m.snapshot()
	if posts != 1 || len(accepted) != 1 || accepted[0].Records == nil || *accepted[0].Dropped != 1 {
		t.Fatalf("posts %d, accepted %+v", posts, accepted)
	}
	var raw map[string]json.RawMessage
	b, _ := json.Marshal(accepted[0])
	if err := json.Unmarshal(b, &raw); err != nil || string(raw["records"]) != "[]" {
		t.Fatalf("records %s (%v)", raw["records"], err)
	}
	refusing := &manager{codes: []int{http.StatusBadRequest}}
	srv2 := httptest.NewServer(refusing)
	defer srv2.Close()
	s2, _ := quietSink(srv2.URL)
	s2.Add(bad)
	if err := s2.Flush(context.Background()); err == nil {
		t.Fatal("a refused batch must be reported")
	}
	if err := s2.Flush(context.Background()); err != nil {
		t.Fatalf("nothing left to send: %v", err)
	}
	if posts, _ := refusing.snapshot(); posts != 1 {
		t.Fatalf("%d posts of a refused drop count, want 1", posts)
	}
}

// fullBus is a Publisher whose stream is full (or, with err, that fails
// with err) for its first `full` publishes.
type fullBus struct {
	full, calls int
	err         error // default ErrBusFull
	stored      []Batch
}

func (b *fullBus) Publish(_ context.Context, subject, _ string, data []byte) error {
	b.calls++
	if b.calls <= b.full {
		if b.err != nil {
			return fmt.Errorf("%w: %s: JetStream system temporarily unavailable", b.err, subject)
		}
		return fmt.Errorf("%w: %s: maximum bytes exceeded", ErrBusFull, subject)
	}
	var batch Batch
	if err := json.Unmarshal(data, &batch); err != nil {
		return err
	}
	b.stored = append(b.stored, batch)
	return nil
}

func (b *fullBus) MaxPayload() int64 { return 1 << 20 }

// TestBusSinkKeepsBatchesAFullStreamRefuses: ErrBusFull is no refusal for
// good: Flush returns nil, the records stay (counted against the bound,
// which drops and counts the rest), the refusals are counted in BusFull,
// and the same batch goes out once the stream takes it.
func TestBusSinkKeepsBatchesAFullStreamRefuses(t *testing.T) {
	bus := &fullBus{full: 3}
	var logs bytes.Buffer
	s := &BusSink{Pub: bus, Pop: "p", Source: "e", Partitions: func() int { return 1 },
		PartitionOf: func(string, int) int { return 0 }, Limit: 10, Log: log.New(&logs, "", 0)}
	for i := range 12 {
		s.Add(Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.0.%d.0/24", i), ConfigID: "c-0123456789", TableVersion: 1})
	}
	for range 3 {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatalf("flush while full: %v", err)
		}
	}
	if st := s.Stats(); st.Pending != 10 || st.Dropped != 2 || st.Refused != 0 || st.BusFull != 3 || st.Sent != 0 {
		t.Fatalf("full: %+v", st)
	}
	if n := strings.Count(logs.String(), "bus stream full"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs.String())
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 0 || st.Sent != 10 || len(bus.stored) != 1 || len(bus.stored[0].Records) != 10 || *bus.stored[0].Dropped != 2 {
		t.Fatalf("after room: %+v, stored %+v", st, bus.stored)
	}
}

// TestBusSinkKeepsBatchesJetStreamCannotTakeNow: ErrBusUnavailable (a 503
// that is no full store) keeps and retries the batch like a full stream but
// is counted in BusUnavailable, not BusFull (until 2026-12-07 every 503 was
// counted as a full stream).
func TestBusSinkKeepsBatchesJetStreamCannotTakeNow(t *testing.T) {
	bus := &fullBus{full: 2, err: ErrBusUnavailable}
	var logs bytes.Buffer
	s := &BusSink{Pub: bus, Pop: "p", Source: "e", Partitions: func() int { return 1 },
		PartitionOf: func(string, int) int { return 0 }, Limit: 10, Log: log.New(&logs, "", 0)}
	for i := range 4 {
		s.Add(Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.0.%d.0/24", i), ConfigID: "c-0123456789", TableVersion: 1})
	}
	for range 2 {
		if err := s.Flush(context.Background()); err != nil {
			t.Fatalf("flush while unavailable: %v", err)
		}
	}
	if st := s.Stats(); st.Pending != 4 || st.Dropped != 0 || st.Refused != 0 || st.BusFull != 0 || st.BusUnavailable != 2 {
		t.Fatalf("unavailable: %+v", st)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 0 || st.Sent != 4 || len(bus.stored) != 1 || st.BusUnavailable != 2 {
		t.Fatalf("after: %+v, stored %+v", st, bus.stored)
	}
}

// partBus refuses, as ErrBusUnavailable (no stream answers), the subjects
// of partitions >= refuseFrom (all with refuseFrom 0), and stores the rest.
type partBus struct {
	refuseFrom int
	subjects   []string
	stored     []Batch
}

func (b *partBus) Publish(_ context.Context, subject, _ string, data []byte) error {
	p, _ := strconv.Atoi(subject[strings.LastIndex(subject, ".")+1:])
	if p >= b.refuseFrom {
		return fmt.Errorf("%w: %s: no stream stores the subject", ErrBusUnavailable, subject)
	}
	var batch Batch
	if err := json.Unmarshal(data, &batch); err != nil {
		return err
	}
	b.subjects, b.stored = append(b.subjects, subject), append(b.stored, batch)
	return nil
}

func (b *partBus) MaxPayload() int64 { return 1 << 20 }

// prefixIndex is the i of "10.0.<i>.0/24" modulo P (a partition function
// the test can predict).
func prefixIndex(prefix string, P int) int {
	i, _ := strconv.Atoi(strings.Split(prefix, ".")[2])
	return i % P
}

// TestBusSinkReformsBatchesForANewPartitionCount: batches formed for P = 8
// whose partition 7 the stream no longer stores (P went down to 6) are
// kept and counted unavailable while the sink reads P = 8, and re-formed
// when it reads P = 6: every record published once in its partition for
// P = 6, the drop count the stale batch carried reported once, the
// buffer's accounting back to zero. The same when P goes up (6 -> 8: the
// shard of the old partition would refuse the records of the new ones).
func TestBusSinkReformsBatchesForANewPartitionCount(t *testing.T) {
	bus := &partBus{refuseFrom: 6}
	var logs bytes.Buffer
	P := 8
	s := &BusSink{Pub: bus, Pop: "p", Source: "e", Partitions: func() int { return P }, PartitionOf: prefixIndex,
		Limit: 10, Log: log.New(&logs, "", 0)}
	add := func(is ...int) {
		for _, i := range is {
			s.Add(Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.0.%d.0/24", i), ConfigID: "c-0123456789", TableVersion: 1})
		}
	}
	add(7, 0, 1, 2, 3, 4, 5, 6, 8, 15, 16, 17) // 10 fit, 2 dropped; the first batch is partition 7's
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 10 || st.Dropped != 2 || st.BusUnavailable != 1 || st.Sent != 0 || len(bus.stored) != 0 {
		t.Fatalf("P = 8 on a stream of 6: %+v", st)
	}
	P = 6
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Pending != 0 || st.PendingBytes != 0 || st.Sent != 10 || st.Dropped != 2 || st.BusUnavailable != 1 || st.Refused != 0 {
		t.Fatalf("P = 6: %+v", st)
	}
	check := func(P int) (records int, dropped int64) {
		for k, b := range bus.stored {
			p, _ := strconv.Atoi(bus.subjects[k][strings.LastIndex(bus.subjects[k], ".")+1:])
			for _, r := range b.Records {
				if prefixIndex(r.ClientPrefix, P) != p {
					t.Errorf("%s in %s (P = %d)", r.ClientPrefix, bus.subjects[k], P)
				}
			}
			records += len(b.Records)
			if b.Dropped != nil {
				dropped += *b.Dropped
			}
		}
		return records, dropped
	}
	if n, d := check(6); n != 10 || d != 2 {
		t.Fatalf("stored %d records, %d drops reported; want 10 and 2", n, d)
	}
	if !strings.Contains(logs.String(), "the cluster has 6 partitions (was 8): 10 records of 8 unacknowledged batches re-formed, 0 dropped") {
		t.Fatalf("log:\n%s", logs.String())
	}

	// P goes up: 6 -> 8, while JetStream is unavailable
	bus.refuseFrom, bus.stored, bus.subjects = 0, nil, nil
	add(9, 10, 11, 12, 13, 14, 18, 23)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	P, bus.refuseFrom = 8, 8
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 0 || st.PendingBytes != 0 || st.Sent != 18 || st.Dropped != 2 {
		t.Fatalf("P = 8: %+v", st)
	}
	if n, d := check(8); n != 8 || d != 0 {
		t.Fatalf("stored %d records, %d drops reported; want 8 and 0", n, d)
	}
}

// switchBus stores every batch with the subject it was published on and,
// after its first publish, switches the sink's partition count to `to`.
type switchBus struct {
	partBus
	P, to    *int
	switched bool
}

func (b *switchBus) Publish(ctx context.Context, subject, id string, data []byte) error {
	err := b.partBus.Publish(ctx, subject, id, data)
	if !b.switched {
		b.switched, *b.P = true, *b.to
	}
	return err
}

// TestBusSinkReadsThePartitionCountBeforeEveryPublish: the cluster document
// changes P (8 -> 6) while a flush is publishing: the batches formed for 8
// and not published yet are re-formed for 6 before they go out, so every
// record after the change lands in its partition for 6. Until 2026-12-07
// P was read only at the start of a flush and the rest of the flush's
// batches went out on their old subjects (a removed partition's refused,
// the kept ones' records refused by their shards: found by review).
func TestBusSinkReadsThePartitionCountBeforeEveryPublish(t *testing.T) {
	P, to := 8, 6
	bus := &switchBus{partBus: partBus{refuseFrom: 8}, P: &P, to: &to}
	var logs bytes.Buffer
	s := &BusSink{Pub: bus, Pop: "p", Source: "e", Partitions: func() int { return P }, PartitionOf: prefixIndex,
		Limit: 100, Log: log.New(&logs, "", 0)}
	for i := range 24 {
		s.Add(Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.0.%d.0/24", i), ConfigID: "c-0123456789", TableVersion: 1})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 0 || st.Sent != 24 || st.BusUnavailable != 0 || st.Refused != 0 {
		t.Fatalf("%+v", st)
	}
	records := 0
	for k, b := range bus.stored {
		p, _ := strconv.Atoi(bus.subjects[k][strings.LastIndex(bus.subjects[k], ".")+1:])
		want := 6
		if k == 0 {
			want = 8 // published before the change
		}
		for _, r := range b.Records {
			if prefixIndex(r.ClientPrefix, want) != p {
				t.Errorf("batch %d: %s in %s (P = %d)", k, r.ClientPrefix, bus.subjects[k], want)
			}
		}
		records += len(b.Records)
	}
	if records != 24 || len(bus.stored) != 1+6 {
		t.Fatalf("%d records in %d batches, want 24 in 1 + 6", records, len(bus.stored))
	}
	if !strings.Contains(logs.String(), "the cluster has 6 partitions (was 8): 21 records of 7 unacknowledged batches re-formed, 0 dropped") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// TestBusSinkDropsABatchItCannotReform: a stale batch whose message cannot
// be read back (it cannot happen: the sink encoded it) is dropped and
// counted, and its records' count travels in the next batch: it never
// blocks the queue.
func TestBusSinkDropsABatchItCannotReform(t *testing.T) {
	bus := &partBus{refuseFrom: 0}
	P := 2
	s := &BusSink{Pub: bus, Pop: "p", Source: "e", Partitions: func() int { return P }, PartitionOf: prefixIndex,
		Limit: 10, Log: log.New(io.Discard, "", 0)}
	for i := range 4 {
		s.Add(Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.0.%d.0/24", i), ConfigID: "c-0123456789", TableVersion: 1})
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.formed) != 2 {
		t.Fatalf("%d batches formed, want 2", len(s.formed))
	}
	s.formed[0].data = []byte("not json")
	P, bus.refuseFrom = 3, 3
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Pending != 0 || st.PendingBytes != 0 || st.Dropped != 2 || st.Sent != 2 {
		t.Fatalf("%+v; want the unreadable batch's 2 records dropped, the other 2 sent", st)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var reported int64
	for _, b := range bus.stored {
		if b.Dropped != nil {
			reported += *b.Dropped
		}
	}
	if reported != 2 {
		t.Fatalf("drops reported %d, want 2", reported)
	}
}
