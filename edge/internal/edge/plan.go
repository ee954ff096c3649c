package edge

import (
	"crypto/tls"
	"math"
	"net/http"
	"net/netip"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// ALPN lists that enforce the HTTP version; the client cannot pick h2 when
// the server does not offer it.
var (
	alpnH2  = []string{"h2", "http/1.1"}
	alpnH11 = []string{"http/1.1"}
)

// ConnConfig is one table configuration, provisioned: everything a
// connection needs is built here, never during a handshake.
type ConnConfig struct {
	ID       string
	HTTP2    bool
	TLS      *tls.Config   // NextProtos enforces the HTTP version
	H2       *http2.Server // nil when HTTP2 is false
	H2Base   *http.Server  // carries MaxHeaderBytes for SETTINGS_MAX_HEADER_LIST_SIZE
	Socket   SocketOpts
	QUIC     *quic.Config // transport parameters for HTTP/3 connections
	Settings H2Settings   // what the SETTINGS frame advertises
	Inexact  []string     // knobs the library can only approximate
	AltSvc   bool         // http.alt_svc: advertise HTTP/3 on TCP responses (with --quic)
}

// Plan is a provisioned decision table; immutable once built.
type Plan struct {
	Table    *rules.Table
	Resolver *rules.Resolver
	Configs  map[string]*ConnConfig
	Default  *ConnConfig
}

// Decision is a connection's decision (rules.Decision: group, config, the
// logged probability, the holdback flag) and its provisioned configuration.
type Decision struct {
	rules.Decision
	Conf *ConnConfig
}

// Decide applies the table to c by spec/decision.md (rules.Decide); draw is
// a uniform per-connection 64-bit integer, used only when the table has no
// salt (with one, the client's cohort draw is used).
func (p *Plan) Decide(c rules.Conn, draw uint64) Decision {
	d := p.Resolver.Decide(c, draw)
	conf := p.Configs[d.Config]
	if conf == nil { // not reachable: validation checks every config id
		conf = p.Default
	}
	return Decision{Decision: d, Conf: conf}
}

// provision builds the plan for t; base holds the certificate and limits.
func provision(t *rules.Table, reg *knobs.Registry, base *tls.Config, h1 *http.Server) *Plan {
	p := &Plan{Table: t, Resolver: rules.NewResolver(t), Configs: map[string]*ConnConfig{}}
	for id, values := range t.Configs {
		p.Configs[id] = provisionConfig(id, reg.Full(values), base, h1)
	}
	p.Default = p.Configs[t.Default]
	return p
}

func provisionConfig(id string, full map[string]any, base *tls.Config, h1 *http.Server) *ConnConfig {
	cc := &ConnConfig{ID: id, HTTP2: full["http.version"] == "2", Socket: socketOpts(full), QUIC: quicConfig(full)}
	cc.AltSvc, _ = full["http.alt_svc"].(bool)
	cc.TLS = base.Clone()
	cc.TLS.GetConfigForClient = nil
	cc.TLS.NextProtos = alpnH11
	if cc.HTTP2 {
		cc.TLS.NextProtos = alpnH2
		cc.Settings, cc.Inexact = h2Settings(full)
		cc.H2, cc.H2Base = cc.Settings.servers(h1)
	}
	return cc
}

// H2Settings are the advertised HTTP/2 SETTINGS of a configuration.
type H2Settings struct {
	MaxConcurrentStreams uint32
	InitialWindowSize    uint32
	MaxFrameSize         uint32
	HeaderTableSize      uint32
	MaxHeaderListSize    uint32
}

// h1MaxHeaderPad is what x/net adds to http.Server.MaxHeaderBytes to get
// SETTINGS_MAX_HEADER_LIST_SIZE (10 fields x 32 bytes).
const h1MaxHeaderPad = 320

// defaultHeaderTableSize is what x/net advertises for a table size of 0.
const defaultHeaderTableSize = 4096

func h2Settings(full map[string]any) (H2Settings, []string) {
	get := func(k string) uint32 { n, _ := knobs.Int(full[k]); return uint32(min(n, math.MaxUint32)) }
	s := H2Settings{get("http2.max_concurrent_streams"), get("http2.initial_window_size"), get("http2.max_frame_size"),
		get("http2.header_table_size"), get("http2.max_header_list_size")}
	var inexact []string
	if s.HeaderTableSize == 0 { // x/net treats 0 as "unset"
		s.HeaderTableSize, inexact = defaultHeaderTableSize, append(inexact, "http2.header_table_size=0 advertised as 4096")
	}
	if s.MaxHeaderListSize <= h1MaxHeaderPad {
		s.MaxHeaderListSize, inexact = h1MaxHeaderPad+1, append(inexact, "http2.max_header_list_size<=320 advertised as 321")
	}
	if s.MaxHeaderListSize > math.MaxInt32 {
		s.MaxHeaderListSize, inexact = math.MaxInt32, append(inexact, "http2.max_header_list_size clipped to 2^31-1")
	}
	return s, inexact
}

// servers maps the SETTINGS onto what golang.org/x/net/http2 exposes.
func (s H2Settings) servers(h1 *http.Server) (*http2.Server, *http.Server) {
	h2 := &http2.Server{
		MaxConcurrentStreams:         s.MaxConcurrentStreams,
		MaxReadFrameSize:             s.MaxFrameSize,
		MaxDecoderHeaderTableSize:    s.HeaderTableSize,
		MaxUploadBufferPerStream:     int32(s.InitialWindowSize),
		MaxUploadBufferPerConnection: int32(max(s.InitialWindowSize, 1<<20)),
		IdleTimeout:                  h1.IdleTimeout,
	}
	base := &http.Server{
		Handler: h1.Handler, ReadTimeout: h1.ReadTimeout, WriteTimeout: h1.WriteTimeout,
		IdleTimeout: h1.IdleTimeout, ErrorLog: h1.ErrorLog,
		MaxHeaderBytes: int(s.MaxHeaderListSize) - h1MaxHeaderPad,
	}
	return h2, base
}

// defaultTable is used when no table is given: every knob at its default.
func defaultTable(reg *knobs.Registry) *rules.Table {
	id := reg.ConfigID(map[string]any{})
	return &rules.Table{Default: id, Configs: map[string]map[string]any{id: {}}}
}

// clientPrefix is the /24 (IPv4) or /64 (IPv6) reported in telemetry.
func clientPrefix(a netip.Addr) string {
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p.String()
}
