// Package fingerprint reads a web server's configuration from outside, as Configanator's study
// (NSDI'22, §2 and Appendix A) does: the HTTP configuration from its answers (ALPN, HTTP/2 SETTINGS,
// TLS, Alt-Svc), the SYN-ACK retransmission timeout by withholding the handshake's ACK, and the
// initial congestion window by withholding the ACKs of the response and counting what arrives.
// The raw parts need root (AF_PACKET capture, a TCX egress BPF program that drops the probe's own
// ACKs); without it the TLS/HTTP parts still run and the rest is reported as skipped.
package fingerprint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"
)

// Prober holds what every step needs. Defaults: MSS 1460, SynAckWait 3.5 s.
type Prober struct {
	Target     Target
	SNI        string        // TLS server name and Host header; empty: none and the address
	Path       string        // the object fetched for the initial window (should exceed IW x MSS)
	MSS        int           // TCP_MAXSEG of the initial-window connection (88..65495)
	SynAckWait time.Duration // how long to wait for the first SYN-ACK retransmission
	Raw        bool          // run the privileged measurements
	Plain      bool          // the target speaks cleartext HTTP/1.1 (no TLS, ALPN or SETTINGS)
	IWTrials   int           // initial-window measurements (1..MaxIWTrials; 0 means DefaultIWTrials)
}

// DefaultIWTrials and MaxIWTrials bound the repeated initial-window measurement: the smallest complete
// count is reported, because what disturbs one flight (a tail loss probe sent after a flight the
// server's own scheduling spread out, an ACK-clocked extra segment) only ever adds segments.
const (
	DefaultIWTrials = 2
	MaxIWTrials     = 5
)

// Skip is a step that did not run, and why.
type Skip struct {
	Step   string `json:"step"`
	Reason string `json:"reason"`
}

// CCGuess is a congestion-control guess from the first flight's shape, or why none is possible.
type CCGuess struct {
	Guess  string `json:"guess"` // "paced", "unpaced" or "" (no guess)
	Reason string `json:"reason"`
}

// Result is everything the probe found; absent parts are nil and named in Skipped or Errors.
type Result struct {
	Target      string            `json:"target"`
	SNI         string            `json:"sni,omitempty"`
	Path        string            `json:"path"`
	TLS         *TLSInfo          `json:"tls,omitempty"`
	ALPN        []ALPNTrial       `json:"alpn"`
	HTTPVersion string            `json:"http_version,omitempty"` // "2" or "1.1": what a browser offering both gets
	HTTP2       *H2Settings       `json:"http2_settings,omitempty"`
	HTTP        *HTTPInfo         `json:"http,omitempty"`
	IW          *IWResult         `json:"initial_window,omitempty"`
	SynAck      *SynAckResult     `json:"synack,omitempty"`
	CC          *CCGuess          `json:"congestion_control,omitempty"`
	Skipped     []Skip            `json:"skipped,omitempty"`
	Errors      map[string]string `json:"errors,omitempty"`
}

// rawEnv is the shared state of the raw steps: the route's interface and the ACK filter on it.
type rawEnv struct {
	ifindex int
	l2      int32 // link-layer header bytes on that interface
	src     netip.Addr
	filter  *ackFilter
}

// ErrUnreachable means not even a TLS connection could be made: nothing else would work either.
var ErrUnreachable = errors.New("target unreachable")

// Run performs every step in turn; each step is bounded by its own timeout.
func (p *Prober) Run(ctx context.Context) (*Result, error) {
	res := &Result{Target: p.Target.Addr.String(), SNI: p.SNI, Path: p.Path, Errors: map[string]string{}}
	if p.Plain {
		res.HTTPVersion = "1.1"
		res.Skipped = append(res.Skipped, Skip{"tls_alpn_http2", "cleartext target (--plain)"})
	} else if err := p.runTLS(ctx, res); err != nil {
		return res, err
	}
	contentLength := int64(-1)
	var err error
	if res.HTTP, err = p.ProbeHTTP(ctx); err != nil {
		res.Errors["http"] = err.Error()
	} else {
		contentLength = res.HTTP.ContentLength
	}
	p.runRaw(ctx, res, contentLength)
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	return res, nil
}

// runTLS fills in TLS, ALPN, the HTTP version and the HTTP/2 SETTINGS.
func (p *Prober) runTLS(ctx context.Context, res *Result) error {
	trials, info, err := p.ProbeALPN(ctx)
	res.ALPN, res.TLS = trials, info
	if err != nil {
		return errors.Join(ErrUnreachable, err)
	}
	if info != nil {
		res.HTTPVersion = map[string]string{"h2": "2"}[info.ALPN]
		if res.HTTPVersion == "" {
			res.HTTPVersion = "1.1"
		}
	}
	if trials[0].Selected == "h2" {
		if res.HTTP2, err = p.ProbeH2Settings(ctx); err != nil {
			res.Errors["http2_settings"] = err.Error()
		}
	} else {
		res.Skipped = append(res.Skipped, Skip{"http2_settings", "the server does not offer h2"})
	}
	return nil
}

func (p *Prober) runRaw(ctx context.Context, res *Result, contentLength int64) {
	skip := func(reason string) {
		res.Skipped = append(res.Skipped, Skip{"initial_window", reason}, Skip{"synack_rto", reason},
			Skip{"congestion_control", reason})
	}
	switch {
	case !p.Raw:
		skip("not requested (--raw=false)")
		return
	case os.Geteuid() != 0:
		skip("needs root: an AF_PACKET capture and a BPF program that drops the probe's own ACKs")
		return
	case !p.Target.Addr.Addr().Is4():
		skip("the raw measurements speak IPv4 only")
		return
	}
	iface, src, err := routeInterface(p.Target.Addr.Addr())
	if err == nil {
		var f *ackFilter
		var l2 int32
		if l2, err = l3Offset(iface.Name); err == nil {
			f, err = newACKFilter(iface.Index, l2)
		}
		if err == nil {
			defer f.Close()
			env := &rawEnv{ifindex: iface.Index, l2: l2, src: src, filter: f}
			p.rawSteps(ctx, env, res, contentLength)
			return
		}
	}
	res.Errors["raw"] = err.Error()
	skip("the raw setup failed (see errors.raw)")
}

func (p *Prober) rawSteps(ctx context.Context, env *rawEnv, res *Result, contentLength int64) {
	var protos []string
	if len(res.ALPN) > 1 && res.ALPN[1].Error == "" {
		protos = []string{"http/1.1"} // else offer no ALPN: h2-only servers then speak HTTP/1.1
	}
	var err error
	if res.IW, err = p.measureIWTrials(ctx, env, protos, contentLength); err != nil {
		res.Errors["initial_window"] = err.Error()
	}
	if res.SynAck, err = p.MeasureSynAckRTO(env, p.SynAckWait); err != nil {
		res.Errors["synack_rto"] = err.Error()
	}
	res.CC = guessCC(res.IW)
}

// measureIWTrials runs MeasureIW p.IWTrials times and keeps the best trial (see betterIW); every
// trial's count is kept in Trials. It fails only when every trial failed.
func (p *Prober) measureIWTrials(ctx context.Context, env *rawEnv, protos []string, contentLength int64) (*IWResult, error) {
	n := p.IWTrials
	if n <= 0 {
		n = DefaultIWTrials
	}
	n = min(n, MaxIWTrials)
	var best *IWResult
	var counts []int
	var errs []error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		r, err := p.MeasureIW(ctx, env, protos, contentLength)
		if err != nil {
			errs = append(errs, fmt.Errorf("trial %d: %w", i+1, err))
			continue
		}
		counts = append(counts, r.Segments)
		if best == nil || betterIW(r, best) {
			best = r
		}
	}
	if best == nil {
		if len(errs) == 0 {
			errs = append(errs, ctx.Err())
		}
		return nil, errors.Join(errs...)
	}
	best.Trials = counts
	return best, nil
}

// betterIW prefers a complete trial (the flight ended with the server's retransmission, not with the
// response) and, among equally complete ones, the smaller count.
func betterIW(a, b *IWResult) bool {
	complete := func(r *IWResult) bool { return r.Retransmission && !r.LowerBound && r.Segments > 0 }
	if complete(a) != complete(b) {
		return complete(a)
	}
	if complete(a) {
		return a.Segments < b.Segments
	}
	return a.Segments > b.Segments // lower bounds: the larger one says more
}

// minPacingRTT: below it a paced first flight cannot be told from an unpaced one (the pacing gaps
// are shorter than scheduling noise).
const minPacingRTT = time.Millisecond

// guessCC tells a paced first flight (BBR, or any sender with a pacing rate) from an unpaced burst
// (CUBIC, Reno): BBR spreads its initial window over about RTT/2.9; an unpaced sender sends it back to back.
func guessCC(iw *IWResult) *CCGuess {
	switch {
	case iw == nil || iw.Segments < 3:
		return &CCGuess{Reason: "no guess: no first flight of 3 or more segments was measured"}
	case time.Duration(iw.RTTUS)*time.Microsecond < minPacingRTT:
		return &CCGuess{Reason: "no guess: the path's RTT is below 1 ms, too short to tell a paced first flight from a burst"}
	case iw.FlightUS >= 0.15*iw.RTTUS:
		return &CCGuess{Guess: "paced", Reason: "the first flight was spread over a large part of the RTT: BBR, or a pacing rate (fq, SO_MAX_PACING_RATE)"}
	default:
		return &CCGuess{Guess: "unpaced", Reason: "the first flight came back to back: a window-based sender without pacing (CUBIC, Reno)"}
	}
}

func (p *Prober) hostHeader() string {
	if p.SNI != "" {
		return p.SNI
	}
	return p.Target.Addr.Addr().String()
}
