package edge

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

func (s *Server) baseRecord(r *http.Request, kind string) telemetry.Record {
	st := stateFrom(r.Context())
	if st == nil && s.cfg.Static { // no handshake selection: the table default, as connDecision says
		ap, _ := netip.ParseAddrPort(r.RemoteAddr)
		st = s.staticState(ap.Addr().Unmap())
	}
	if st == nil { // not reachable through the TLS listener
		st = &ConnState{Decision: Decision{Conf: s.plan.Load().Default}, Prefix: "unknown"}
		st.Config, st.P = st.Conf.ID, 1
	}
	rec := s.stateRecord(st, kind)
	rec.ALPN = map[int]string{2: "h2", 3: "h3"}[r.ProtoMajor]
	if rec.ALPN == "" {
		rec.ALPN = "http/1.1"
	}
	return rec
}

// stateRecord is a record of kind with what the handshake decided and
// learned (no ALPN: the caller knows it).
func (s *Server) stateRecord(st *ConnState, kind string) telemetry.Record {
	prefix := st.Prefix
	if prefix == "" {
		prefix = clientPrefix(st.Addr)
	}
	rec := telemetry.Record{
		Time: float64(time.Now().UnixNano()) / 1e9, Kind: kind, ClientPrefix: prefix, Group: st.Group,
		ConfigID: st.Config, Probability: telemetry.Ptr(st.P), TableVersion: st.TableVersion, Holdback: telemetry.Ptr(st.Holdback),
		SNI: st.SNI, TLSFingerprint: st.JA4}
	if s.cfg.FullAddress && st.Addr.IsValid() {
		rec.ClientAddr = st.Addr.WithZone("").String() // a zone would break the 45-character bound
	}
	rec.Device = st.Device
	if st.HandshakeRTT > 0 {
		rec.HandshakeRttMs = telemetry.Ptr(st.HandshakeRTT)
	}
	if st.ASN > 0 {
		rec.ASN = telemetry.Ptr(st.ASN)
	}
	rec.Region = st.Region
	return rec
}

func (s *Server) responseRecord(r *http.Request, w *responseRecorder) telemetry.Record {
	rec := s.baseRecord(r, "response")
	ms := func(d time.Duration) *float64 { v := float64(d.Microseconds()) / 1000; return &v }
	rec.TTFBMs, rec.TTLBMs = ms(w.first.Sub(w.start)), ms(time.Since(w.start))
	rec.ObjectBytes = telemetry.Ptr(w.bytes)
	return rec
}

// newSink is the telemetry destination of --telemetry: none, JSON lines on
// stdout ("-"), or batched POSTs to the manager with the bearer token.
func newSink(cfg Config, client *http.Client, logger *log.Logger) telemetry.Sink {
	switch cfg.Telemetry {
	case "":
		return nil
	case "-":
		out := cfg.TelemetryOut
		if out == nil {
			out = os.Stdout
		}
		ls := telemetry.NewLineSink(out, cfg.Source)
		ls.LimitBytes = cfg.TelemetryBufferBytes
		return ls
	}
	return &telemetry.HTTPSink{URL: cfg.Telemetry, Token: cfg.Token, Source: cfg.Source, LimitBytes: cfg.TelemetryBufferBytes, Client: client, Log: logger}
}

// flushEvery ships buffered telemetry every period until ctx ends.
func flushEvery(ctx context.Context, sink telemetry.Sink, every time.Duration, logger *log.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := sink.Flush(ctx); err != nil {
				logger.Printf("edge: %v", err)
			}
		}
	}
}

// Stats is a snapshot of the edge's counters (logged every StatsEvery when
// they change, and at shutdown).
type Stats struct {
	TableVersion     int64 // applied
	TablesRefused    int64
	SNIIgnored       int64 // client SNIs out of the schema's bounds, treated as absent
	SocketApplied    int64
	SocketFailed     int64
	TelemetryDropped int64 // records lost (buffer bound, invalid, refused by the manager)
	// with --bus: where the tables came from, the partition count, the
	// partitions with a table
	TableSource           string
	Partitions, WithTable int
}

func (st Stats) String() string {
	s := fmt.Sprintf("table_version=%d tables_refused=%d sni_ignored=%d socket_applied=%d socket_failed=%d telemetry_dropped=%d",
		st.TableVersion, st.TablesRefused, st.SNIIgnored, st.SocketApplied, st.SocketFailed, st.TelemetryDropped)
	if st.TableSource != "" {
		s += fmt.Sprintf(" table_source=%s partitions=%d partitions_with_table=%d", st.TableSource, st.Partitions, st.WithTable)
	}
	return s
}

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	st := Stats{TableVersion: s.Plan().Table.Version, TablesRefused: s.TablesRefused(), SNIIgnored: s.Sanitized.SNI.Load(),
		SocketApplied: s.Socket.Applied.Load(), SocketFailed: s.Socket.Failed.Load()}
	if s.sink != nil {
		st.TelemetryDropped = s.sink.Dropped()
	}
	if s.busTables != nil {
		st.TableSource = s.busTables.Source()
		if pp := s.parts.Load(); pp != nil {
			st.Partitions = pp.P
			for _, p := range pp.plans {
				if p != nil {
					st.WithTable++
				}
			}
		}
	}
	return st
}

// logStats logs the counters every period while they change, until ctx ends.
func (s *Server) logStats(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last Stats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if st := s.Stats(); st != last {
				s.Log.Printf("edge: stats: %v", st)
				last = st
			}
		}
	}
}
