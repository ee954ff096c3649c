package edge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/metrics"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Label bounds: at most this many distinct label pairs per counter; the
// rest are counted under "_other" (and in the counter's _overflow_total).
const (
	maxDecisionPairs = 1000 // (group, config)
	maxDevicePairs   = 256  // (proto, device): the device map is the operator's
	maxErrorPairs    = 256  // (knob, kind): six knobs times errno names
)

// defaultGroup labels decisions no rule matched (the table default).
const defaultGroup = "_default"

// edgeMetrics are tailor-edge's Prometheus metrics (--metrics). Counters
// the server keeps anyway (tables refused, telemetry, setsockopt) are read
// at scrape time; the rest are counted on the connection path only when
// --metrics is on.
type edgeMetrics struct {
	srv         *metrics.Server
	decisions   *metrics.Bounded // group, config
	holdback    *prometheus.CounterVec
	devices     *metrics.Bounded // proto, device
	alpn        *prometheus.CounterVec
	rtt         *prometheus.HistogramVec
	applyErrors *metrics.Bounded // knob, kind
}

// newMetrics listens on --metrics and registers the edge's metrics.
func (s *Server) newMetrics(addr string) (*edgeMetrics, error) {
	srv, err := metrics.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	reg := srv.Registry
	m := &edgeMetrics{srv: srv,
		decisions: metrics.NewBounded(reg, "tailor_edge_decisions", "Connections by the decision-table group (_default: no rule matched) and configuration they got (TCP at the ClientHello, QUIC at the first Initial).", "group", "config", maxDecisionPairs),
		holdback: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tailor_edge_holdback_connections_total",
			Help: "Connections whose client is held back (served the table default; spec/decision.md)."}, []string{"proto"}),
		devices: metrics.NewBounded(reg, "tailor_edge_connections_by_device", "Handshakes by transport and device class (from the JA4 through the device map).", "proto", "device", maxDevicePairs),
		alpn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tailor_edge_handshakes_total",
			Help: "TLS handshakes by negotiated ALPN (none: the client offered no ALPN)."}, []string{"alpn"}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tailor_edge_handshake_rtt_seconds",
			Help: "Handshake RTT: TCP_INFO at the ClientHello (the SYN/ACK round trip), QUIC's smoothed RTT after the handshake.", Buckets: metrics.RTTBuckets}, []string{"proto"}),
		applyErrors: metrics.NewBounded(reg, "tailor_edge_apply_errors", "Failed setsockopt calls by knob and errno.", "knob", "kind", maxErrorPairs),
	}
	reg.MustRegister(m.holdback, m.alpn, m.rtt)
	s.registerScraped(reg)
	return m, nil
}

// registerScraped exports what the server already counts.
func (s *Server) registerScraped(reg prometheus.Registerer) {
	metrics.GaugeFunc(reg, "tailor_edge_table_version", "Version of the decision table in force.",
		func() float64 { return float64(s.table().Version) })
	metrics.GaugeFunc(reg, "tailor_edge_table_age_seconds", "Age of the table in force: now - its generated_at (or - its installation when generated_at is 0).",
		func() float64 {
			return metrics.TableAge(time.Now(), s.table().GeneratedAt, time.Unix(0, s.installedAt.Load()))
		})
	metrics.CounterFunc(reg, "tailor_edge_table_loads_total", "Tables installed (the first one included).", func() float64 { return float64(s.loads.Load()) })
	metrics.CounterFunc(reg, "tailor_edge_table_version_regressions_total", "Tables installed with a lower version than the one in force (a restored manager, or a stale table replayed).", func() float64 { return float64(s.regressions.Load()) })
	metrics.CounterFunc(reg, "tailor_edge_table_rejections_total", "Tables refused: invalid, unsigned or badly signed, too large (with --bus: envelopes).", func() float64 { return float64(s.TablesRefused()) })
	if s.busTables != nil {
		s.busTables.RegisterMetrics(reg)
	}
	metrics.CounterFunc(reg, "tailor_edge_table_fetch_errors_total", "Table fetches that failed (source unreachable, server error).", func() float64 { return float64(s.fetchErrors.Load()) })
	metrics.CounterFunc(reg, "tailor_edge_socket_applied_total", "Connections whose setsockopt knobs were applied.", func() float64 { return float64(s.Socket.Applied.Load()) })
	metrics.CounterFunc(reg, "tailor_edge_sni_ignored_total", "Client SNIs outside the schema's bounds, treated as absent.", func() float64 { return float64(s.Sanitized.SNI.Load()) })
	if st, ok := s.sink.(interface{ Stats() telemetry.QueueStats }); ok {
		q := func(f func(telemetry.QueueStats) int64) func() float64 {
			return func() float64 { return float64(f(st.Stats())) }
		}
		metrics.CounterFunc(reg, "tailor_edge_telemetry_records_sent_total", "Telemetry records shipped (accepted by the manager, or written with --telemetry -).", q(func(x telemetry.QueueStats) int64 { return x.Sent }))
		metrics.CounterFunc(reg, "tailor_edge_telemetry_records_dropped_total", "Telemetry records lost: buffer bound, invalid, or refused by the manager.", q(func(x telemetry.QueueStats) int64 { return x.Dropped }))
		metrics.CounterFunc(reg, "tailor_edge_telemetry_records_invalid_total", "Of the dropped records: those that broke the schema.", q(func(x telemetry.QueueStats) int64 { return x.Invalid }))
		metrics.CounterFunc(reg, "tailor_edge_telemetry_bus_full_total", "Publishes the bus refused because its stream was full (with --bus); their records stay buffered and are retried.", q(func(x telemetry.QueueStats) int64 { return x.BusFull }))
		metrics.CounterFunc(reg, "tailor_edge_telemetry_bus_unavailable_total", "Publishes the bus answered 503 for another reason than a full stream (with --bus); their records stay buffered and are retried.", q(func(x telemetry.QueueStats) int64 { return x.BusUnavailable }))
		metrics.GaugeFunc(reg, "tailor_edge_telemetry_records_pending", "Telemetry records buffered.", func() float64 { return float64(st.Stats().Pending) })
	}
	if g := s.geo; g != nil {
		metrics.CounterFunc(reg, "tailor_edge_geoip_lookups_total", "Client addresses looked up (one per connection).", func() float64 { return float64(g.Stats.Lookups.Load()) })
		metrics.CounterFunc(reg, "tailor_edge_geoip_asn_found_total", "Lookups that gave an ASN.", func() float64 { return float64(g.Stats.ASNFound.Load()) })
		metrics.CounterFunc(reg, "tailor_edge_geoip_region_found_total", "Lookups that gave a region.", func() float64 { return float64(g.Stats.RegionFound.Load()) })
		metrics.CounterFunc(reg, "tailor_edge_geoip_invalid_asn_total", "ASNs outside the schema's bounds: dropped.", func() float64 { return float64(g.Stats.InvalidASN.Load()) })
		metrics.CounterFunc(reg, "tailor_edge_geoip_invalid_region_total", "Country or subdivision codes outside the schema's pattern: dropped.", func() float64 { return float64(g.Stats.InvalidRegion.Load()) })
	}
}

// table is the table in force (empty while the server is being set up:
// the listener is open before the first table is).
func (s *Server) table() *rules.Table {
	if p := s.plan.Load(); p != nil {
		return p.Table
	}
	return &rules.Table{}
}

// decided counts a connection's decision (group, configuration, holdback).
func (m *edgeMetrics) decided(proto string, st *ConnState) {
	g := st.Group
	if g == "" {
		g = defaultGroup
	}
	m.decisions.Inc(g, st.Config)
	if st.Holdback {
		m.holdback.WithLabelValues(proto).Inc()
	}
}

func (m *edgeMetrics) device(proto, device string) {
	if device != "" {
		m.devices.Inc(proto, device)
	}
}

// handshakeRTT observes ms (0 = not measured).
func (m *edgeMetrics) handshakeRTT(proto string, ms float64) {
	if ms > 0 {
		m.rtt.WithLabelValues(proto).Observe(ms / 1000)
	}
}

// verifyConnection counts every TLS handshake (TCP and QUIC) by ALPN; it
// is the base tls.Config's VerifyConnection, so every provisioned config
// inherits it. It never refuses a connection.
func (m *edgeMetrics) verifyConnection(cs tls.ConnectionState) error {
	p := cs.NegotiatedProtocol
	if p == "" {
		p = "none"
	}
	m.alpn.WithLabelValues(p).Inc()
	return nil
}

// applyFailed counts setsockopt failures by knob and errno name.
func (m *edgeMetrics) applyFailed(errs []error) {
	for _, err := range errs {
		knob, kind := "socket", "other"
		var se *SocketError
		if errors.As(err, &se) {
			knob = se.Knob
		}
		var errno unix.Errno
		if errors.As(err, &errno) {
			if name := unix.ErrnoName(errno); name != "" {
				kind = name
			}
		}
		m.applyErrors.Inc(knob, kind)
	}
}

// MetricsAddr is the --metrics listener's address ("" when off).
func (s *Server) MetricsAddr() string {
	if s.metrics == nil {
		return ""
	}
	return s.metrics.srv.Addr()
}
