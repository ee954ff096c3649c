package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/geoip"
	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Server is a provisioned tailor-edge instance.
type Server struct {
	cfg       Config
	reg       *knobs.Registry
	base      *tls.Config               // certificate + GetConfigForClient
	h1        *http.Server              // HTTP/1.1 and the h2 hand-off
	plan      atomic.Pointer[Plan]      // the table (--bus: the built-in default of partitions without one)
	parts     atomic.Pointer[partPlans] // --bus: the partitions' tables (tables.go)
	tables    *rules.Source
	nc        *nats.Conn     // --bus connection (bus.go)
	busTables *bus.Tables    // --bus table watcher
	sink      telemetry.Sink // nil without --telemetry
	root      *os.Root       // --root, opened once (handler.go)
	client    *http.Client   // to the manager: tables and telemetry (--manager-ca)

	refused     atomic.Int64 // tables refused (tables.go)
	loads       atomic.Int64 // tables installed
	regressions atomic.Int64 // tables installed with a lower version than the one they replaced (tables.go)
	fetchErrors atomic.Int64 // table fetches that failed (not refusals)
	installedAt atomic.Int64 // unix ns of the last installation

	metrics *edgeMetrics // nil without --metrics (metrics.go)
	geo     *geoip.DB    // nil without --geoip-asn/--geoip-region

	Socket     SocketStats                  // setsockopt outcomes
	Sanitized  SanitizeStats                // client strings ignored (SNI out of bounds)
	OnDecision func(c *Conn, st *ConnState) // test hook after the socket knobs; default nil
	Log        *log.Logger                  // default: log.Default()

	devices     *DeviceMap                                   // nil: every device "unknown"
	altSvc      atomic.Value                                 // string: the Alt-Svc header of TCP responses ("" without --quic)
	pendingQUIC sync.Map                                     // *quic.ClientInfo -> *quicConn, between two quic-go hooks
	onQUIC      atomic.Pointer[func(*quic.Conn, *ConnState)] // test hook, see SetOnQUICDecision
	mu          sync.Mutex
	quic        *quicServer // nil without --quic
	closed      bool

	stop    context.CancelFunc
	wg      sync.WaitGroup
	connWG  sync.WaitGroup // QUIC connection-record watchers (connrecord.go)
	closing atomic.Int64   // TCP connection records being made (connrecord.go)
	serving atomic.Int64   // responses whose record is not yet added (handler.go, measure)
	live    sync.Map       // *Conn -> struct{}: reported TCP connections not yet closed (connrecord.go)
}

// New validates cfg, loads the certificate and the first table.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	reg, err := knobs.Default()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, reg: reg, Log: log.Default()}
	if s.client, err = rules.ManagerClient(cfg.ManagerCA); err != nil {
		return nil, fmt.Errorf("%w: --manager-ca: %v", ErrConfig, err)
	}
	if cfg.DeviceMap != "" {
		if s.devices, err = LoadDeviceMap(cfg.DeviceMap); err != nil {
			return nil, err
		}
	}
	if cfg.Bus != "" {
		if err := s.setupBus(); err != nil {
			return nil, err
		}
	} else {
		s.sink = newSink(cfg, s.client, s.Log)
	}
	if err := s.setupGeoIP(); err != nil {
		s.closeBus()
		return nil, err
	}
	if err := s.setupRest(); err != nil {
		s.closeBus()
		_ = s.geo.Close()
		if s.metrics != nil {
			_ = s.metrics.srv.Close()
		}
		return nil, err
	}
	return s, nil
}

// setupRest opens --metrics first (its counters hook into the TLS
// configurations), then TLS, HTTP and the first table.
func (s *Server) setupRest() (err error) {
	if s.cfg.Metrics != "" {
		if s.metrics, err = s.newMetrics(s.cfg.Metrics); err != nil {
			return err
		}
	}
	if err := s.setupTLS(); err != nil {
		return err
	}
	if err := s.setupHTTP(); err != nil {
		return err
	}
	return s.setupTables()
}

// setupGeoIP opens --geoip-asn and --geoip-region; a missing or corrupt
// file is one error naming the flag.
func (s *Server) setupGeoIP() error {
	if s.cfg.GeoIPASN == "" && s.cfg.GeoIPRegion == "" {
		return nil
	}
	db, err := geoip.Open(s.cfg.GeoIPASN, s.cfg.GeoIPRegion)
	var oe *geoip.OpenError
	if errors.As(err, &oe) {
		flag := map[string]string{"asn": "--geoip-asn", "region": "--geoip-region"}[oe.Which]
		return fmt.Errorf("%w: %s %s: %v", ErrConfig, flag, oe.Path, oe.Err)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	s.geo = db
	s.Log.Printf("edge: geoip: %s", db.Type())
	return nil
}

func (s *Server) setupTLS() error {
	cert, err := loadCertificate(s.cfg)
	if err != nil {
		return err
	}
	s.base = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: alpnH11}
	s.base.GetConfigForClient = s.configForClient
	if s.metrics != nil { // every configuration is cloned from base: all count handshakes
		s.base.VerifyConnection = s.metrics.verifyConnection
	}
	return nil
}

func (s *Server) setupHTTP() error {
	h, err := s.handler()
	if err != nil {
		return err
	}
	s.h1 = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		// no WriteTimeout: it would cap every response's total time (a big
		// download on a slow link); handler.go sets a per-write deadline.
		MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		ConnContext:    connContext,
		TLSNextProto:   map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": s.serveH2},
	}
	return nil
}

// serveH2 serves a connection that negotiated h2 with its config's SETTINGS.
func (s *Server) serveH2(_ *http.Server, c *tls.Conn, h http.Handler) {
	conf := s.plan.Load().Default
	if ec, ok := c.NetConn().(*Conn); ok {
		if st := ec.State(); st != nil {
			conf = st.Conf
		}
		if ec.tel != nil {
			ec.tel.alpn.Store(protoH2)
		}
	}
	if conf.H2 == nil { // cannot happen: only h2 configs offer "h2"
		_ = c.Close()
		return
	}
	ctx := connContext(context.Background(), c)
	conf.H2.ServeConn(c, &http2.ServeConnOpts{Context: ctx, BaseConfig: conf.H2Base, Handler: h})
}

// Serve accepts TLS connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	quicDone := make(chan error, 1)
	if s.cfg.QUIC {
		q, err := s.listenQUIC(ln.Addr())
		if err != nil {
			s.mu.Unlock()
			cancel()
			return err
		}
		s.quic = q
		go func() { quicDone <- q.serve() }()
	} else {
		quicDone <- nil
	}
	s.startBackground(ctx)
	s.mu.Unlock()
	tlsConf, wrapped := s.base, listener{Listener: ln, s: s}
	if s.cfg.Static {
		tlsConf = s.plan.Load().Default.TLS // no GetConfigForClient
	}
	err := s.h1.Serve(tls.NewListener(wrapped, tlsConf))
	if q := s.quic; q != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = q.close() // TCP failed: stop HTTP/3 too
	}
	qerr := <-quicDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err = errors.Join(err, qerr); err != nil {
		return fmt.Errorf("edge: serve: %w", err)
	}
	return nil
}

// Close stops serving, the table poller and flushes telemetry.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	q, stop := s.quic, s.stop
	s.mu.Unlock()
	err := s.h1.Close() // closes the TCP connections: their records are added now
	// and those net/http no longer tracks (an HTTP/2 connection its client
	// closed, whose goroutine has not closed it yet) are closed here, so
	// that their records too come before the final flush
	s.live.Range(func(c, _ any) bool { _ = c.(*Conn).Close(); return true })
	// a connection that its own goroutine was closing at that moment may
	// still be making its record, and a handler whose client already has
	// the whole response may not have added its record yet (bounded wait:
	// never blocks shutdown; the connections are closed, so handlers end)
	for deadline := time.Now().Add(time.Second); s.closing.Load()+s.serving.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if q != nil {
		err = errors.Join(err, q.close())
		s.connWG.Wait() // the QUIC connections' records
	}
	if stop != nil {
		stop()
	}
	s.wg.Wait()
	if s.sink != nil {
		if ferr := telemetry.FlushFinal(context.Background(), s.sink); ferr != nil {
			s.Log.Printf("edge: %v", ferr)
		}
	}
	s.closeBus()
	if s.root != nil {
		_ = s.root.Close()
	}
	if s.metrics != nil {
		_ = s.metrics.srv.Close()
	}
	return errors.Join(err, s.geo.Close())
}

func (s *Server) startBackground(ctx context.Context) {
	if s.tables != nil {
		s.wg.Go(func() { s.pollTables(ctx) })
	}
	if s.busTables != nil {
		s.wg.Go(func() { s.busTables.Watch(ctx, s.nc) })
	}
	if s.sink != nil {
		s.wg.Go(func() { flushEvery(ctx, s.sink, s.cfg.Flush, s.Log) })
	}
	s.wg.Go(func() { s.logStats(ctx, time.Minute) })
}

// SetOnQUICDecision installs a hook called when a QUIC handshake completes
// (tests); safe while serving: UDP gives the race detector no ordering.
func (s *Server) SetOnQUICDecision(f func(c *quic.Conn, st *ConnState)) { s.onQUIC.Store(&f) }

// connRecords: report a "connection" record per connection.
func (s *Server) connRecords() bool { return s.sink != nil && s.cfg.ConnRecords }

// Plan is the table in force.
func (s *Server) Plan() *Plan { return s.plan.Load() }
