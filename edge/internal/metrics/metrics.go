// Package metrics is the Prometheus side of tailor-edge and tailor-agent:
// the read-only /metrics listener (--metrics HOST:PORT) and counters whose
// label sets are bounded, so a table with many groups, or clients that
// present many device classes, cannot grow the exposition without limit.
package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the exposition is served.
const Path = "/metrics"

// Other is the label value that stands for every label set beyond a
// Bounded counter's limit.
const Other = "_other"

// ErrMetrics prefixes listener errors.
var ErrMetrics = errors.New("metrics")

// Server is a /metrics listener with its own registry (the process's Go
// runtime and process statistics are registered in it too).
type Server struct {
	Registry *prometheus.Registry
	srv      *http.Server
	ln       net.Listener
	done     chan struct{}
}

// Listen opens addr (HOST:PORT; port 0 picks one) and serves GET /metrics
// from a new registry. It is read-only: every other method or path is
// refused. Operators bind it to loopback or a management network.
func Listen(addr string) (*Server, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: --metrics %q: want HOST:PORT", ErrMetrics, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --metrics %s: %v", ErrMetrics, addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, h) // GET also answers HEAD
	s := &Server{Registry: reg, ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the listener is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the listener and the scrapes in progress.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// Bounded is a counter with two labels that keeps at most Limit distinct
// label pairs; further pairs are counted under (Other, Other) and in the
// overflow counter. Inc is safe for concurrent use and does not allocate
// for a pair already seen.
type Bounded struct {
	vec      *prometheus.CounterVec
	overflow prometheus.Counter
	limit    int

	mu   sync.RWMutex
	seen map[[2]string]prometheus.Counter
}

// NewBounded registers name{l1, l2} and name_overflow_total in reg.
func NewBounded(reg prometheus.Registerer, name, help, l1, l2 string, limit int) *Bounded {
	b := &Bounded{limit: limit, seen: map[[2]string]prometheus.Counter{},
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name + "_total", Help: help}, []string{l1, l2}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{Name: name + "_overflow_total",
			Help: fmt.Sprintf("Events counted under %s=%q because %d distinct (%s, %s) pairs were already exported.", l1, Other, limit, l1, l2)})}
	reg.MustRegister(b.vec, b.overflow)
	return b
}

// Inc counts one event for (v1, v2).
func (b *Bounded) Inc(v1, v2 string) {
	key := [2]string{v1, v2}
	b.mu.RLock()
	c, ok := b.seen[key]
	b.mu.RUnlock()
	if !ok {
		c = b.add(key)
	}
	c.Inc()
}

func (b *Bounded) add(key [2]string) prometheus.Counter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.seen[key]; ok {
		return c
	}
	if len(b.seen) >= b.limit {
		b.overflow.Inc()
		return b.vec.WithLabelValues(Other, Other)
	}
	c := b.vec.WithLabelValues(key[0], key[1])
	b.seen[key] = c
	return c
}

// CounterFunc registers a counter read at scrape time (a monotonic value
// the process already keeps).
func CounterFunc(reg prometheus.Registerer, name, help string, f func() float64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// GaugeFunc registers a gauge read at scrape time.
func GaugeFunc(reg prometheus.Registerer, name, help string, f func() float64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// RTTBuckets are the handshake and path RTT histogram buckets, in seconds
// (1 ms .. 5 s: loopback to satellite and beyond).
var RTTBuckets = []float64{.001, .0025, .005, .01, .02, .04, .08, .16, .32, .64, 1.28, 2.56, 5.12}

// TableAge is the age in seconds of a table generated at generatedAt (unix
// seconds; 0 = not stated, then installedAt counts).
func TableAge(now time.Time, generatedAt float64, installedAt time.Time) float64 {
	if generatedAt > 0 {
		return max(float64(now.UnixNano())/1e9-generatedAt, 0)
	}
	if installedAt.UnixNano() <= 0 {
		return 0
	}
	return now.Sub(installedAt).Seconds()
}
