package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

func record(i int) telemetry.Record {
	return telemetry.Record{Time: 1.7e9, Kind: "response", ClientPrefix: fmt.Sprintf("10.%d.%d.0/24", i/256, i%256),
		ConfigID: "c-0123456789", TableVersion: 3}
}

func newSink(t *testing.T, url string, limit int, opts Options) (*telemetry.BusSink, *nats.Conn) {
	t.Helper()
	opts.URLs, opts.ReconnectWait, opts.Log = url, 100*time.Millisecond, log.New(os.Stderr, "", 0)
	nc, err := Connect(opts)
	must(t, err)
	t.Cleanup(nc.Close)
	pub, err := NewPublisher(nc)
	must(t, err)
	return &telemetry.BusSink{Pub: pub, Pop: "fra-1", Source: "edge-a", Partitions: func() int { return 4 }, PartitionOf: Partition, Limit: limit}, nc
}

type stored struct {
	subject, id string
	batch       telemetry.Batch
}

// readStream returns every message of the telemetry stream.
func readStream(t *testing.T, js jetstream.JetStream) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, "TAILOR_TELEMETRY", jetstream.OrderedConsumerConfig{})
	must(t, err)
	info, err := js.Stream(ctx, "TAILOR_TELEMETRY")
	must(t, err)
	n := int(info.CachedInfo().State.Msgs)
	var out []stored
	for len(out) < n {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		must(t, err)
		var b telemetry.Batch
		must(t, json.Unmarshal(m.Data(), &b))
		must(t, b.Validate())
		out = append(out, stored{m.Subject(), m.Headers().Get(jetstream.MsgIDHeader), b})
	}
	return out
}

var msgIDRE = regexp.MustCompile(`^edge-a/[0-9a-f]{16}/[0-9]+$`)

func checkStored(t *testing.T, msgs []stored) (records int, dropped int64) {
	t.Helper()
	return checkStoredP(t, msgs, 4)
}

// checkStoredP checks subjects, message ids and that every record is in
// its subject's partition for P partitions.
func checkStoredP(t *testing.T, msgs []stored, P int) (records int, dropped int64) {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range msgs {
		p, err := strconv.Atoi(strings.TrimPrefix(m.subject, "tailor.tel.fra-1."))
		if err != nil || !strings.HasPrefix(m.subject, "tailor.tel.fra-1.") {
			t.Fatalf("subject %q", m.subject)
		}
		if !msgIDRE.MatchString(m.id) || ids[m.id] {
			t.Errorf("Nats-Msg-Id %q (repeated: %v)", m.id, ids[m.id])
		}
		ids[m.id] = true
		for _, r := range m.batch.Records {
			if got := Partition(r.ClientPrefix, P); got != p {
				t.Errorf("%s in %s (partition %d)", r.ClientPrefix, m.subject, got)
			}
		}
		records += len(m.batch.Records)
		if m.batch.Dropped != nil {
			dropped += *m.batch.Dropped
		}
	}
	return records, dropped
}

// TestBusSink: batches per partition with acks; with the server stopped
// the buffer holds its bound and counts the rest; publishing resumes when
// a server comes back on the same port and store.
func TestBusSink(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Partitions: 4})
	js, _ := srv.Setup(t)
	sink, nc := newSink(t, srv.URL(), 100, Options{})
	ctx := context.Background()
	for i := range 40 {
		sink.Add(record(i))
	}
	must(t, sink.Flush(ctx))
	if st := sink.Stats(); st.Sent != 40 || st.Pending != 0 || st.Dropped != 0 {
		t.Fatalf("after flush: %+v", st)
	}
	msgs := readStream(t, js)
	if n, d := checkStored(t, msgs); n != 40 || d != 0 || len(msgs) < 2 || len(msgs) > 4 {
		t.Fatalf("stored %d records in %d messages, dropped %d", n, len(msgs), d)
	}

	srv.Stop()
	for deadline := time.Now().Add(5 * time.Second); nc.IsConnected(); {
		if time.Now().After(deadline) {
			t.Fatal("still connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 150 {
		sink.Add(record(1000 + i))
	}
	must(t, sink.Flush(ctx)) // bus away: nil, records kept
	if st := sink.Stats(); st.Pending != 100 || st.Dropped != 50 || st.Sent != 40 {
		t.Fatalf("bus away: %+v, want 100 pending, 50 dropped", st)
	}
	time.Sleep(2 * time.Second)
	srv.Restart()
	deadline := time.Now().Add(15 * time.Second)
	for sink.Stats().Pending > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not resumed: %+v", sink.Stats())
		}
		time.Sleep(100 * time.Millisecond)
		must(t, sink.Flush(ctx))
	}
	if st := sink.Stats(); st.Sent != 140 || st.Dropped != 50 {
		t.Fatalf("resumed: %+v", st)
	}
	if n, d := checkStored(t, readStream(t, js)); n != 140 || d != 50 {
		t.Fatalf("stored %d records, dropped %d; want 140 and 50", n, d)
	}
}

// TestBusSinkWaitsForPartitions: without the cluster document (P
// unknown) records wait in the buffer.
func TestBusSinkWaitsForPartitions(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Partitions: 4})
	js, _ := srv.Setup(t)
	sink, _ := newSink(t, srv.URL(), 100, Options{})
	P := 0
	sink.Partitions = func() int { return P }
	sink.Add(record(1))
	must(t, sink.Flush(context.Background()))
	if st := sink.Stats(); st.Pending != 1 || st.Sent != 0 {
		t.Fatalf("no P: %+v", st)
	}
	P = 4
	must(t, sink.Flush(context.Background()))
	if n, _ := checkStored(t, readStream(t, js)); n != 1 {
		t.Fatalf("stored %d", n)
	}
}

// TestBusSinkSplitsToMaxPayload: with a small server max_payload the
// batches are split to fit, every record stored once.
func TestBusSinkSplitsToMaxPayload(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{MaxPayload: 64 << 10, Partitions: 4})
	js, _ := srv.Setup(t)
	sink, _ := newSink(t, srv.URL(), 5000, Options{})
	long := strings.Repeat("x", 120)
	for i := range 2000 {
		r := record(i % 8)
		r.Group, r.TLSFingerprint = long+long, long
		sink.Add(r)
	}
	must(t, sink.Flush(context.Background()))
	if st := sink.Stats(); st.Sent != 2000 || st.Pending != 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	msgs := readStream(t, js)
	if n, _ := checkStored(t, msgs); n != 2000 {
		t.Fatalf("stored %d records", n)
	}
	for _, m := range msgs {
		b, _ := json.Marshal(m.batch)
		if len(b) > 64<<10 {
			t.Errorf("a message of %d bytes", len(b))
		}
	}
	t.Logf("%d messages", len(msgs))
}

// TestBusSinkRefused: a batch the stream refuses for good (over its max
// message size) is dropped and counted, and the count travels in the next
// batch.
func TestBusSinkRefused(t *testing.T) {
	srv := bustest.Start(t, false)
	js, err := jetstream.New(srv.Connect(t))
	must(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "TAILOR_TELEMETRY", Subjects: []string{"tailor.tel.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgSize: 1024})
	must(t, err)
	sink, _ := newSink(t, srv.URL(), 100, Options{})
	sink.Partitions = func() int { return 1 }
	long := strings.Repeat("x", 120)
	for range 3 {
		r := record(0)
		r.Group, r.TLSFingerprint = long+long, long
		sink.Add(r)
	}
	if err := sink.Flush(ctx); !errors.Is(err, telemetry.ErrTelemetry) {
		t.Fatalf("refused batch: %v", err)
	}
	if st := sink.Stats(); st.Dropped != 3 || st.Refused != 3 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	must(t, sink.Flush(ctx)) // the drop count alone
	msgs := readStream(t, js)
	if n, d := checkStored(t, msgs); n != 0 || d != 3 || len(msgs) != 1 {
		t.Fatalf("stored %d messages, %d records, dropped %d; want the drop count 3 alone", len(msgs), n, d)
	}
}

// TestBusSinkStreamFull: TAILOR_TELEMETRY discards nothing, so a full
// stream refuses the publish. The batch stays buffered (neither dropped nor
// counted as refused for good), every record JetStream acknowledged stays
// in the stream, the buffer's bound drops and counts what does not fit
// while the stream is full, and publishing resumes once room is made (the
// shards trim acknowledged history; here a purge). Until 2026-12-07 the
// refusal was a JetStream API error like any other: the batch was dropped.
func TestBusSinkStreamFull(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{StreamMaxBytes: 16 << 10, Partitions: 4})
	js, _ := srv.Setup(t)
	sink, _ := newSink(t, srv.URL(), 200, Options{})
	ctx := context.Background()
	long := strings.Repeat("x", 200)
	n := 0
	add := func(k int) {
		for range k {
			r := record(n)
			r.Group = long
			sink.Add(r)
			n++
		}
	}
	for round := 0; sink.Stats().BusFull == 0; round++ {
		if round == 50 {
			t.Fatalf("a 16 KiB stream never refused: %+v", sink.Stats())
		}
		add(20)
		if err := sink.Flush(ctx); err != nil {
			t.Fatalf("flush %d: %v (a full stream must keep the batch, not drop it)", round, err)
		}
	}
	st := sink.Stats()
	if st.Pending == 0 || st.Pending > 20 || st.Dropped != 0 || st.Refused != 0 || st.Sent != int64(n-st.Pending) {
		t.Fatalf("stream full: %+v; want records of the last flush pending, none dropped", st)
	}
	if got, _ := checkStored(t, readStream(t, js)); int64(got) != st.Sent {
		t.Fatalf("the stream holds %d records, JetStream acknowledged %d", got, st.Sent)
	}
	add(300) // the bound (200) holds while the stream is full
	must(t, sink.Flush(ctx))
	if st = sink.Stats(); st.Pending != 200 || st.Dropped != int64(n)-st.Sent-200 || st.BusFull < 2 {
		t.Fatalf("bound: %+v", st)
	}
	stored, reported := 0, int64(0)
	stream, err := js.Stream(ctx, "TAILOR_TELEMETRY")
	must(t, err)
	for round := 0; ; round++ {
		got, dropped := checkStored(t, readStream(t, js))
		stored, reported = stored+got, reported+dropped
		if sink.Stats().Pending == 0 {
			break
		}
		if round == 50 {
			t.Fatalf("not drained: %+v", sink.Stats())
		}
		must(t, stream.Purge(ctx)) // room: what was read goes
		must(t, sink.Flush(ctx))
	}
	st = sink.Stats()
	if int64(stored) != st.Sent || st.Sent+st.Dropped != int64(n) || reported != st.Dropped || st.Refused != 0 {
		t.Fatalf("drained: %+v; %d records stored, %d drops reported, %d added", st, stored, reported, n)
	}
	t.Logf("%d records: %d stored, %d dropped by the bound (counted), %d publishes refused by the full stream", n, stored, st.Dropped, st.BusFull)
}

// TestBusSinkNoStreamYetIsUnavailable: before a manager created the stream
// (the window between its cluster document, which the edge reads, and its
// stream; since 2026-12-07 the managers create the stream first) a publish
// finds no stream: nats.go's ErrNoStreamResponse, no API error. The batch
// is kept and retried, counted as unavailable (until 2026-12-07 it was
// returned as it was: kept, counted nowhere), and goes out once the stream
// exists.
func TestBusSinkNoStreamYetIsUnavailable(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Partitions: 4})
	sink, _ := newSink(t, srv.URL(), 100, Options{})
	ctx := context.Background()
	for i := range 10 {
		sink.Add(record(i))
	}
	must(t, sink.Flush(ctx))
	if st := sink.Stats(); st.BusUnavailable != 1 || st.Pending != 10 || st.Dropped != 0 || st.Refused != 0 || st.Sent != 0 {
		t.Fatalf("no stream: %+v; want the batch kept and counted unavailable", st)
	}
	js, _ := srv.Setup(t)
	must(t, sink.Flush(ctx))
	if st := sink.Stats(); st.Pending != 0 || st.Sent != 10 || st.BusUnavailable != 1 {
		t.Fatalf("stream created: %+v", st)
	}
	if n, _ := checkStored(t, readStream(t, js)); n != 10 {
		t.Fatalf("stored %d records", n)
	}
}

// TestBusSinkReformsForFewerPartitions: the stream stores the partitions of
// P = 8 (bustest.Subjects, as the managers set it up), then of P = 6 (the
// cluster document recreated with fewer partitions). A batch formed for
// partition 7 is refused (no stream answers): kept, retried and counted as
// unavailable while the edge still reads P = 8; once it reads P = 6 the
// batch is re-formed, its records re-partitioned, and everything is stored
// in its partition for P = 6. Until 2026-12-07 the batch kept its subject
// and was retried forever ahead of every other batch, counted nowhere
// (found by review).
func TestBusSinkReformsForFewerPartitions(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Partitions: 8})
	js, _ := srv.Setup(t)
	sink, _ := newSink(t, srv.URL(), 1000, Options{})
	P := 8
	sink.Partitions = func() int { return P }
	first := 0
	for Partition(record(first).ClientPrefix, 8) != 7 {
		first++
	}
	sink.Add(record(first)) // the first batch formed is partition 7's
	for i := range 60 {
		if i != first {
			sink.Add(record(i))
		}
	}
	bustest.SetPartitions(t, js, 6)
	ctx := context.Background()
	for round := 1; round <= 2; round++ {
		must(t, sink.Flush(ctx))
		if st := sink.Stats(); st.BusUnavailable != int64(round) || st.Pending != 60 || st.Sent != 0 || st.Dropped != 0 || st.Refused != 0 {
			t.Fatalf("flush %d with P = 8 on a stream of 6: %+v; want the batch kept, counted unavailable", round, st)
		}
	}
	P = 6 // the edge reads the new cluster document
	must(t, sink.Flush(ctx))
	if st := sink.Stats(); st.Pending != 0 || st.PendingBytes != 0 || st.Sent != 60 || st.Dropped != 0 || st.BusUnavailable != 2 {
		t.Fatalf("after P = 6: %+v", st)
	}
	msgs := readStream(t, js)
	if n, _ := checkStoredP(t, msgs, 6); n != 60 {
		t.Fatalf("stored %d records of 60", n)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, r := range m.batch.Records {
			if seen[r.ClientPrefix] {
				t.Errorf("%s stored twice", r.ClientPrefix)
			}
			seen[r.ClientPrefix] = true
		}
	}
}
