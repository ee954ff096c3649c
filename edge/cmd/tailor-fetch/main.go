// Command tailor-fetch fetches one URL over HTTP/3 (quic-go), HTTP/2 or
// HTTP/1.1 (net/http over TCP) on a fresh connection and prints one JSON line
// with the connection set-up time, time to first byte, total time, bytes and
// protocol. It is the testbed's QUIC client (curl 7.88 in Debian has no
// HTTP/3); the TCP modes exist so both protocols are timed by one client.
//
// Usage:
//
//	tailor-fetch [--http 3|2|1.1] [--insecure] [--resolve HOST:IP] [--local-addr IP] [--timeout 30s] URL
//
// Exit status: 0 for a 2xx response read to the end, 1 for a failed fetch
// (the JSON line says why in "error"), 2 with one line
// "tailor-fetch: error: ..." naming the flag for bad input.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Result is the one JSON line tailor-fetch prints. Times are milliseconds
// from the start of the fetch (name resolution is local: --resolve or an IP).
type Result struct {
	URL      string `json:"url"`
	Protocol string `json:"protocol"` // "h3", "h2", "http/1.1" as negotiated; "" when no response came
	Status   int    `json:"status"`
	Bytes    int64  `json:"bytes"` // body bytes read
	// ConnectMs: TCP connect done (TCP) or the QUIC handshake done (QUIC: no separate transport set-up).
	ConnectMs float64 `json:"connect_ms"`
	// HandshakeMs: TLS handshake done (TCP) or QUIC handshake done (QUIC; = ConnectMs).
	HandshakeMs float64 `json:"handshake_ms"`
	TTFBMs      float64 `json:"ttfb_ms"`  // response headers received
	TotalMs     float64 `json:"total_ms"` // last body byte read
	AltSvc      string  `json:"alt_svc"`  // the response's Alt-Svc header ("" when absent)
	Error       string  `json:"error"`
}

type options struct {
	url      *url.URL
	http     string
	insecure bool
	resolve  map[string]string // host -> ip
	timeout  time.Duration
	local    netip.Addr // --local-addr: source address (invalid = the kernel's choice)
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("tailor-fetch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	httpV := fs.String("http", "3", "HTTP version: 3 (QUIC), 2 or 1.1 (TLS over TCP)")
	insecure := fs.Bool("insecure", false, "do not verify the server certificate")
	var resolves []string
	fs.Func("resolve", "HOST:IP (or HOST:PORT:IP as in curl): connect to IP for HOST; repeatable", func(v string) error {
		resolves = append(resolves, v)
		return nil
	})
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole fetch")
	local := fs.String("local-addr", "", "source IP address of the connection (TCP or UDP)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, usageError{err.Error()}
	}
	o := options{http: *httpV, insecure: *insecure, timeout: *timeout, resolve: map[string]string{}}
	switch o.http {
	case "3", "2", "1.1":
	default:
		return o, usageError{fmt.Sprintf("--http %q: must be 3, 2 or 1.1", o.http)}
	}
	if o.timeout <= 0 {
		return o, usageError{fmt.Sprintf("--timeout %v: must be > 0", o.timeout)}
	}
	if *local != "" {
		a, err := netip.ParseAddr(*local)
		if err != nil {
			return o, usageError{fmt.Sprintf("--local-addr %q: must be an IP address", *local)}
		}
		o.local = a
	}
	for _, r := range resolves {
		parts := strings.Split(r, ":")
		if len(parts) != 2 && len(parts) != 3 {
			return o, usageError{fmt.Sprintf("--resolve %q: must be HOST:IP or HOST:PORT:IP", r)}
		}
		ip := parts[len(parts)-1]
		if _, err := netip.ParseAddr(ip); err != nil || parts[0] == "" {
			return o, usageError{fmt.Sprintf("--resolve %q: must be HOST:IP with an IP address", r)}
		}
		o.resolve[parts[0]] = ip
	}
	if fs.NArg() != 1 {
		return o, usageError{fmt.Sprintf("exactly one URL argument is needed, got %d", fs.NArg())}
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return o, usageError{fmt.Sprintf("URL %q: must be an https:// URL", fs.Arg(0))}
	}
	o.url = u
	return o, nil
}

// dialAddr maps host:port through --resolve.
func (o options) dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, ok := o.resolve[host]; ok {
		return net.JoinHostPort(ip, port)
	}
	return addr
}

// dialQUIC dials addr (through --resolve) from --local-addr when given;
// the UDP socket is closed with the connection.
func (o options) dialQUIC(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
	if !o.local.IsValid() {
		return quic.DialAddr(ctx, o.dialAddr(addr), tc, qc)
	}
	ua, err := net.ResolveUDPAddr("udp", o.dialAddr(addr))
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: o.local.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("--local-addr %s: %w", o.local, err)
	}
	tr := &quic.Transport{Conn: udp}
	c, err := tr.Dial(ctx, ua, tc, qc)
	if err != nil {
		_ = tr.Close()
		_ = udp.Close()
		return nil, err
	}
	go func() { <-c.Context().Done(); _ = tr.Close(); _ = udp.Close() }()
	return c, nil
}

func fetch(ctx context.Context, o options) Result {
	res := Result{URL: o.url.String()}
	ms := func(start, t time.Time) float64 { return float64(t.Sub(start).Microseconds()) / 1000 }
	tlsConf := &tls.Config{InsecureSkipVerify: o.insecure, ServerName: o.url.Hostname()} //nolint:gosec // --insecure is the user's choice
	var rt http.RoundTripper
	start := time.Now()
	var connDone, tlsDone time.Time
	switch o.http {
	case "3":
		tr := &http3.Transport{
			TLSClientConfig: tlsConf,
			Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				c, err := o.dialQUIC(ctx, addr, tc, qc) // returns after the handshake
				if err == nil {
					connDone = time.Now()
					tlsDone = connDone
				}
				return c, err
			},
		}
		defer tr.Close()
		rt = tr
	default:
		d := &net.Dialer{}
		if o.local.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: o.local.AsSlice()}
		}
		tr := &http.Transport{
			TLSClientConfig:   tlsConf,
			ForceAttemptHTTP2: o.http == "2",
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, o.dialAddr(addr))
			},
		}
		if o.http == "1.1" {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // no h2
		} else {
			tr.TLSClientConfig.NextProtos = []string{"h2"}
		}
		defer tr.CloseIdleConnections()
		rt = tr
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			ConnectDone:      func(_, _ string, err error) { connDone = time.Now() },
			TLSHandshakeDone: func(tls.ConnectionState, error) { tlsDone = time.Now() },
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url.String(), nil)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	resp, err := rt.RoundTrip(req)
	headers := time.Now()
	if !connDone.IsZero() {
		res.ConnectMs = ms(start, connDone)
	}
	if !tlsDone.IsZero() {
		res.HandshakeMs = ms(start, tlsDone)
	}
	if err != nil {
		res.Error = err.Error()
		res.TotalMs = ms(start, time.Now())
		return res
	}
	defer resp.Body.Close()
	res.TTFBMs, res.Status, res.AltSvc = ms(start, headers), resp.StatusCode, resp.Header.Get("Alt-Svc")
	switch {
	case resp.ProtoMajor == 3:
		res.Protocol = "h3"
	case resp.ProtoMajor == 2:
		res.Protocol = "h2"
	default:
		res.Protocol = "http/1.1"
	}
	n, err := io.Copy(io.Discard, resp.Body)
	res.Bytes, res.TotalMs = n, ms(start, time.Now())
	if err != nil {
		res.Error = err.Error()
	} else if resp.StatusCode < 200 || resp.StatusCode > 299 {
		res.Error = fmt.Sprintf("HTTP status %d", resp.StatusCode)
	}
	return res
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: tailor-fetch [--http 3|2|1.1] [--insecure] [--resolve HOST:IP] [--local-addr IP] [--timeout 30s] URL")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tailor-fetch: error: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	res := fetch(ctx, o)
	line, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(line))
	if res.Error != "" {
		return 1
	}
	return 0
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
