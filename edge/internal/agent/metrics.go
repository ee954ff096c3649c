package agent

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailor-project/tailor/edge/internal/metrics"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// maxDecisionPairs bounds the (group, config) label pairs exported; the
// rest are counted under "_other".
const maxDecisionPairs = 1000

// agentMetrics are what the agent counts per event for /metrics; the
// program's own counters are read from the BPF map at scrape time.
type agentMetrics struct {
	decisions *metrics.Bounded       // group, config of connections closed (their telemetry events)
	family    *prometheus.CounterVec // family
	minRTT    prometheus.Histogram
}

// RegisterMetrics exports the agent's metrics in reg (tailor-agent run
// --metrics): the sock_ops program's counters, the table and the
// telemetry sink's counters, and per-event counts by group and
// configuration and by address family. Call it before Start.
func (a *Agent) RegisterMetrics(reg prometheus.Registerer, sink telemetry.Sink) {
	m := &agentMetrics{
		decisions: metrics.NewBounded(reg, "tailor_agent_decisions", "Connections closed, by the decision-table group (_default: no rule matched) and configuration the sock_ops program gave them (from their telemetry events).", "group", "config", maxDecisionPairs),
		family: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tailor_agent_connections_closed_total",
			Help: "Connections closed with a telemetry event, by address family."}, []string{"family"}),
		minRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tailor_agent_connection_min_rtt_seconds",
			Help: "Minimum RTT of closed connections (TCP min_rtt).", Buckets: metrics.RTTBuckets}),
	}
	reg.MustRegister(m.family, m.minRTT, programCollector{a})
	metrics.GaugeFunc(reg, "tailor_agent_table_version", "Version of the decision table installed in the program (0 = none).", func() float64 { return float64(a.Version()) })
	metrics.GaugeFunc(reg, "tailor_agent_table_age_seconds", "Age of the installed table: now - its generated_at (or - its installation when generated_at is 0).", func() float64 {
		return metrics.TableAge(time.Now(), a.tableGenerated(), time.Unix(0, a.installedAt.Load()))
	})
	metrics.CounterFunc(reg, "tailor_agent_table_loads_total", "Tables installed.", func() float64 { return float64(a.tableLoads.Load()) })
	metrics.CounterFunc(reg, "tailor_agent_table_rejections_total", "Tables refused: invalid, unsigned or badly signed, too large.", func() float64 { return float64(a.tableRejections.Load()) })
	metrics.CounterFunc(reg, "tailor_agent_records_group_forgotten_total", "Connection records whose table version the agent no longer remembers (closed long after many installs): sent without a group.", func() float64 { return float64(a.groupsForgotten.Load()) })
	metrics.CounterFunc(reg, "tailor_agent_table_fetch_errors_total", "Table fetches that failed (source unreachable, server error).", func() float64 { return float64(a.tableFetchErrors.Load()) })
	registerSink(reg, sink)
	a.metrics.Store(m)
}

// registerSink exports the telemetry sink's counters (none when telemetry is off).
func registerSink(reg prometheus.Registerer, sink telemetry.Sink) {
	st, ok := sink.(interface{ Stats() telemetry.QueueStats })
	if !ok {
		return
	}
	q := func(f func(telemetry.QueueStats) int64) func() float64 {
		return func() float64 { return float64(f(st.Stats())) }
	}
	metrics.CounterFunc(reg, "tailor_agent_telemetry_records_sent_total", "Telemetry records shipped (accepted by the manager, or written).", q(func(x telemetry.QueueStats) int64 { return x.Sent }))
	metrics.CounterFunc(reg, "tailor_agent_telemetry_records_dropped_total", "Telemetry records lost: buffer bound, invalid, or refused by the manager.", q(func(x telemetry.QueueStats) int64 { return x.Dropped }))
	metrics.CounterFunc(reg, "tailor_agent_telemetry_bus_full_total", "Publishes the bus refused because its stream was full (with --bus); their records stay buffered and are retried.", q(func(x telemetry.QueueStats) int64 { return x.BusFull }))
	metrics.CounterFunc(reg, "tailor_agent_telemetry_bus_unavailable_total", "Publishes the bus answered 503 for another reason than a full stream (with --bus); their records stay buffered and are retried.", q(func(x telemetry.QueueStats) int64 { return x.BusUnavailable }))
	metrics.GaugeFunc(reg, "tailor_agent_telemetry_records_pending", "Telemetry records buffered.", func() float64 { return float64(st.Stats().Pending) })
}

// observe counts one closed connection's event.
func (m *agentMetrics) observe(r *telemetry.Record) {
	g := r.Group
	if g == "" {
		g = "_default"
	}
	m.decisions.Inc(g, r.ConfigID)
	fam := "ipv4"
	if strings.Contains(r.ClientPrefix, ":") {
		fam = "ipv6"
	}
	m.family.WithLabelValues(fam).Inc()
	if r.MinRttMs != nil && *r.MinRttMs > 0 {
		m.minRTT.Observe(*r.MinRttMs / 1000)
	}
}

// programCollector reads the sock_ops program's per-CPU counters at scrape.
type programCollector struct{ a *Agent }

var programDescs = struct {
	tuned, def, holdback, events, lost, storage, pending, received, applyErrors *prometheus.Desc
}{
	tuned:       prometheus.NewDesc("tailor_agent_connections_tuned_total", "Connections the sock_ops program configured at ESTABLISHED.", nil, nil),
	def:         prometheus.NewDesc("tailor_agent_connections_default_total", "Of those: connections no rule matched (the table default).", nil, nil),
	holdback:    prometheus.NewDesc("tailor_agent_holdback_connections_total", "Connections whose client is held back (spec/decision.md).", nil, nil),
	events:      prometheus.NewDesc("tailor_agent_events_total", "Close events the program submitted to the ring buffer.", nil, nil),
	lost:        prometheus.NewDesc("tailor_agent_events_lost_total", "Close events lost because the ring buffer was full.", nil, nil),
	storage:     prometheus.NewDesc("tailor_agent_storage_failures_total", "sk_storage allocation failures (no telemetry for the connection).", nil, nil),
	pending:     prometheus.NewDesc("tailor_agent_syn_draws_reused_total", "Connections that reused their TIMEOUT_INIT draw (tables without a salt).", nil, nil),
	received:    prometheus.NewDesc("tailor_agent_events_received_total", "Events the agent read from the ring buffer.", nil, nil),
	applyErrors: prometheus.NewDesc("tailor_agent_apply_errors_total", "Failed bpf_setsockopt calls by knob.", []string{"knob", "kind"}, nil),
}

func (c programCollector) Describe(ch chan<- *prometheus.Desc) {
	d := programDescs
	for _, x := range []*prometheus.Desc{d.tuned, d.def, d.holdback, d.events, d.lost, d.storage, d.pending, d.received, d.applyErrors} {
		ch <- x
	}
}

func (c programCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.a.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(programDescs.tuned, err)
		return
	}
	d := programDescs
	for desc, v := range map[*prometheus.Desc]uint64{d.tuned: st.Tuned, d.def: st.Miss, d.holdback: st.Holdback, d.events: st.Events,
		d.lost: st.EventsLost, d.storage: st.StorageFail, d.pending: st.PendingHit, d.received: st.Received} {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	for _, knob := range KnobNames { // every knob, 0 included: a fixed, bounded set
		ch <- prometheus.MustNewConstMetric(d.applyErrors, prometheus.CounterValue, float64(st.ApplyErrors[knob]), knob, "bpf_setsockopt")
	}
}
