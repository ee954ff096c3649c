package edge

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

func (s *Server) baseRecord(r *http.Request, kind string) telemetry.Record {
	st := stateFrom(r.Context())
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
		rec.ClientAddr = st.Addr.String()
	}
	rec.Device = st.Device
	if st.HandshakeRTT > 0 {
		rec.HandshakeRttMs = telemetry.Ptr(st.HandshakeRTT)
	}
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
func newSink(cfg Config) telemetry.Sink {
	switch cfg.Telemetry {
	case "":
		return nil
	case "-":
		out := cfg.TelemetryOut
		if out == nil {
			out = os.Stdout
		}
		return telemetry.NewLineSink(out, cfg.Source)
	}
	return &telemetry.HTTPSink{URL: cfg.Telemetry, Token: cfg.Token, Source: cfg.Source}
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
