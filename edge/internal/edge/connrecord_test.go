package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// connRecords flushes s's sink until want "connection" records have been
// written to out (connections close asynchronously on the server side).
func connRecords(t *testing.T, s *Server, out *lockedBuffer, want int) []telemetry.Record {
	t.Helper()
	var conns []telemetry.Record
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		must(t, s.sink.Flush(context.Background()))
		out.mu.Lock()
		data := bytes.Clone(out.b.Bytes())
		out.mu.Unlock()
		conns = conns[:0]
		for _, r := range readBatches(t, data) {
			if r.Kind == "connection" {
				conns = append(conns, r)
			}
		}
		if len(conns) >= want {
			break
		}
	}
	if len(conns) != want {
		t.Fatalf("%d connection records, want %d: %+v", len(conns), want, conns)
	}
	return conns
}

// TestConnectionRecords: every TCP and QUIC connection that got a
// configuration yields one schema-valid "connection" record at close, with
// its decision, ALPN, SNI, fingerprint and transport statistics (TCP_INFO
// at close for TCP, quic-go's for QUIC); a connection closed before its
// ClientHello (nothing chosen) yields none.
func TestConnectionRecords(t *testing.T) {
	out := &lockedBuffer{}
	table := tableJSON(t, 4, h11, route{prefix: "127.0.0.0/8", sni: "fast.test", values: h2})
	s, addr := startServer(t, Config{Telemetry: "-", TelemetryOut: out, ConnRecords: true, QUIC: true, ApplySocket: true}, table)
	get(t, addr, "fast.test", "/data.bin") // h2, rule -> group "ga"
	get(t, addr, "slow.test", "/data.bin") // no rule: default, HTTP/1.1
	c, err := net.Dial("tcp", addr)        // no ClientHello: no record
	must(t, err)
	must(t, c.Close())
	resp, body, _, _ := h3Get(t, addr, "127.0.0.1", "fast.test", "/data.bin")
	if resp.ProtoMajor != 3 || len(body) != 100000 {
		t.Fatalf("h3: proto %s, %d bytes", resp.Proto, len(body))
	}
	byALPN := map[string]telemetry.Record{}
	for _, r := range connRecords(t, s, out, 3) {
		byALPN[r.ALPN] = r
	}
	h2c, h11c, h3c := byALPN["h2"], byALPN["http/1.1"], byALPN["h3"]
	if h2c.Group != "ga" || h2c.ConfigID != configID(t, h2) || h2c.SNI != "fast.test" || h11c.Group != "" ||
		h11c.ConfigID != configID(t, h11) || h11c.SNI != "slow.test" || h3c.Kind == "" {
		t.Fatalf("records by ALPN %+v", byALPN)
	}
	for alpn, r := range byALPN {
		if r.TableVersion != 4 || r.ClientPrefix != "127.0.0.0/24" || r.Probability == nil || *r.Probability != 1 ||
			r.Holdback == nil || r.TLSFingerprint == "" || r.Device != UnknownDevice || r.HandshakeRttMs == nil ||
			r.DurationMs == nil || *r.DurationMs <= 0 || r.SrttMs == nil || r.MinRttMs == nil ||
			r.BytesSent == nil || *r.BytesSent < 100000 || r.BytesRetrans == nil || r.Retransmits == nil {
			t.Errorf("%s record %+v", alpn, r)
		}
	}
	for _, r := range []telemetry.Record{h2c, h11c} { // TCP_INFO at close
		if r.BytesAcked == nil || *r.BytesAcked < 100000 || r.Delivered == nil || *r.Delivered <= 0 || r.Cwnd == nil ||
			*r.Cwnd <= 0 || r.MSS == nil || *r.MSS <= 0 || r.MaxDeliveryRate == nil || *r.MaxDeliveryRate <= 0 ||
			r.CongestionControl != "cubic" { // the registry default, applied by setsockopt
			t.Errorf("%s TCP record %+v", r.ALPN, r)
		}
	}
	if h3c.Cwnd != nil || h3c.BytesAcked != nil || h3c.CongestionControl != "" || h3c.TLSFingerprint[:1] != "q" {
		t.Errorf("h3 record %+v", h3c)
	}
}

// TestConnectionRecordsBounded: connection records share the response
// records' bounded buffer; what does not fit is dropped and counted in the
// batch's "dropped".
func TestConnectionRecordsBounded(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "www")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "index.html"), []byte("hi"), 0o644))
	out := &lockedBuffer{}
	s, err := New(Config{Root: root, SelfSigned: true, Telemetry: "-", TelemetryOut: out, ConnRecords: true, Flush: time.Hour})
	must(t, err)
	s.sink.(*telemetry.LineSink).Limit = 2 // before Serve: no request runs yet
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	for range 3 {
		get(t, ln.Addr().String(), "localhost", "/")
	}
	must(t, s.Close()) // closes the connections (records), then flushes
	must(t, <-done)
	var recs []telemetry.Record
	var dropped int64
	sc := bufio.NewScanner(bytes.NewReader(out.b.Bytes()))
	for sc.Scan() {
		var b telemetry.Batch
		must(t, json.Unmarshal(sc.Bytes(), &b))
		must(t, b.Validate())
		recs = append(recs, b.Records...)
		if b.Dropped != nil {
			dropped += *b.Dropped
		}
	}
	// 3 responses + 3 connections = 6 records, 2 fit
	if len(recs) != 2 || dropped != 4 || s.sink.Dropped() != 4 {
		t.Errorf("%d records shipped, %d dropped (sink says %d); want 2 and 4", len(recs), dropped, s.sink.Dropped())
	}
}

// TestStaticRecordsNameTheClient: with --static (no per-connection
// selection) a response record carries the client's prefix and the table's
// version, as the connection record does; until 2026-12-07 it had prefix
// "unknown" and version 0, and the manager refused it.
func TestStaticRecordsNameTheClient(t *testing.T) {
	out := &lockedBuffer{}
	table := tableJSON(t, 4, h11, route{prefix: "127.0.0.0/8", sni: "fast.test", values: h2})
	s, addr := startServer(t, Config{Telemetry: "-", TelemetryOut: out, Static: true}, table)
	get(t, addr, "fast.test", "/data.bin")
	var recs []telemetry.Record
	for deadline := time.Now().Add(5 * time.Second); len(recs) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		must(t, s.sink.Flush(context.Background()))
		out.mu.Lock()
		data := bytes.Clone(out.b.Bytes())
		out.mu.Unlock()
		for _, r := range readBatches(t, data) {
			if r.Kind == "response" {
				recs = append(recs, r)
			}
		}
	}
	if len(recs) != 1 {
		t.Fatalf("%d response records, want 1", len(recs))
	}
	r := recs[0]
	if r.ClientPrefix != "127.0.0.0/24" || r.TableVersion != 4 || r.ConfigID != configID(t, h11) ||
		r.Probability == nil || *r.Probability != 1 || r.Device != UnknownDevice {
		t.Fatalf("static response record %+v", r)
	}
}
