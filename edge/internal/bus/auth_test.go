package bus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
)

// TestEdgeUserPermissions: with the edge user (bustest.EdgePermissions)
// the watch and the telemetry publish work without one permission
// violation, and the edge can neither read telemetry nor write tables.
func TestEdgeUserPermissions(t *testing.T) {
	srv := bustest.Start(t, true)
	js, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	tabs, _ := newTables(t, k, t.TempDir())
	snaps := make(chan Snapshot, 16)
	tabs.OnChange(func(s Snapshot) { snaps <- s })

	if _, err := Connect(Options{URLs: srv.URL(), User: bustest.EdgeUser}); err == nil || !strings.Contains(err.Error(), "--bus-password-file") {
		t.Fatalf("user without password file: %v", err)
	}
	sink, nc := newSink(t, srv.URL(), 100, Options{User: bustest.EdgeUser, PasswordFile: srv.PasswordFile(bustest.EdgeUser)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tabs.Watch(ctx, nc); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	must(t, putKV(kv, ClusterKey, bustest.Cluster(2)))
	must(t, putKV(kv, "part.1", k.Envelope(t, 1, bustest.Table(t, 4, "", nil))))
	waitFor(t, snaps, func(s Snapshot) bool { return s.Tables[1] != nil && s.Tables[1].Version == 4 })
	for i := range 20 {
		sink.Add(record(i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for sink.Stats().Sent < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("not published: %+v", sink.Stats())
		}
		must(t, sink.Flush(context.Background()))
		time.Sleep(50 * time.Millisecond)
	}
	if n, _ := checkStored(t, readStream(t, js)); n != 20 {
		t.Fatalf("stored %d", n)
	}
	// stop the watch (consumer deletes) before reading the log
	cancel()
	<-done
	time.Sleep(200 * time.Millisecond)
	if v := srv.Violations(); len(v) > 0 {
		t.Fatalf("permission violations with the edge user:\n%s", strings.Join(v, "\n"))
	}

	// what the edge must not do
	errs := make(chan error, 4)
	bad, err := nats.Connect(srv.URL(), nats.UserInfo(bustest.EdgeUser, srv.EdgePass),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	must(t, err)
	defer bad.Close()
	if _, err := bad.SubscribeSync("tailor.tel.>"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("subscribe tailor.tel.>: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the edge user may subscribe to telemetry")
	}
	bjs, err := jetstream.New(bad)
	must(t, err)
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	if _, err := bjs.Publish(cctx, "$KV.tailor-tables.part.1", []byte("x")); err == nil {
		t.Fatal("the edge user may write the tables bucket")
	}
}

func putKV(kv jetstream.KeyValue, key string, v []byte) error {
	_, err := kv.Put(context.Background(), key, v)
	return err
}
