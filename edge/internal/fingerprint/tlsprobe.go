package fingerprint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http2"
)

// ALPNTrial is one TLS handshake offering Offered; Selected is the server's choice ("" when it
// answered without ALPN), Error the handshake's failure (a server refusing every offered protocol
// answers with the no_application_protocol alert).
type ALPNTrial struct {
	Offered  []string `json:"offered"`
	Selected string   `json:"selected"`
	Error    string   `json:"error,omitempty"`
}

// TLSInfo is what the handshake that offered h2 and http/1.1 negotiated.
type TLSInfo struct {
	Version string `json:"version"`
	Cipher  string `json:"cipher"`
	ALPN    string `json:"alpn"`
}

// HTTPInfo is what one GET of the probe's path showed.
type HTTPInfo struct {
	Status        int    `json:"status"`
	Proto         string `json:"proto"`
	Server        string `json:"server,omitempty"`
	AltSvc        string `json:"alt_svc,omitempty"`
	H3            bool   `json:"h3_advertised"`
	ContentLength int64  `json:"content_length"` // -1 when the server did not say
}

// H2Settings is the server's first SETTINGS frame, by parameter name, and the connection-level
// flow-control window it opened (65535 plus its first WINDOW_UPDATE on stream 0, if any).
type H2Settings struct {
	Values           map[string]uint32 `json:"values"`
	ConnectionWindow uint32            `json:"connection_window"`
}

const stepTimeout = 5 * time.Second // every network step of the probe

func (p *Prober) tlsConfig(protos []string) *tls.Config {
	// The probe reads configuration, not identity: certificates are not verified.
	return &tls.Config{ServerName: p.SNI, NextProtos: protos, InsecureSkipVerify: true} //nolint:gosec
}

func (p *Prober) dialTLS(ctx context.Context, protos []string) (*tls.Conn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: stepTimeout}, Config: p.tlsConfig(protos)}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", p.Target.Addr.String())
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

// ProbeALPN offers h2 alone, http/1.1 alone, then both (h2 first, as browsers do).
func (p *Prober) ProbeALPN(ctx context.Context) ([]ALPNTrial, *TLSInfo, error) {
	var trials []ALPNTrial
	var info *TLSInfo
	var netErr error
	for _, offer := range [][]string{{"h2"}, {"http/1.1"}, {"h2", "http/1.1"}} {
		t := ALPNTrial{Offered: offer}
		c, err := p.dialTLS(ctx, offer)
		if err != nil {
			t.Error = shortTLSError(err)
			var opErr *net.OpError
			if errors.As(err, &opErr) && opErr.Op == "dial" {
				netErr = err
			}
		} else {
			st := c.ConnectionState()
			t.Selected = st.NegotiatedProtocol
			if len(offer) == 2 {
				info = &TLSInfo{Version: tls.VersionName(st.Version), Cipher: tls.CipherSuiteName(st.CipherSuite), ALPN: st.NegotiatedProtocol}
			}
			c.Close()
		}
		trials = append(trials, t)
	}
	if info == nil && netErr != nil {
		return trials, nil, fmt.Errorf("tls: %w", netErr)
	}
	return trials, info, nil
}

func shortTLSError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "remote error: "); i >= 0 {
		return s[i:]
	}
	return s
}

var settingNames = map[http2.SettingID]string{
	http2.SettingHeaderTableSize:      "HEADER_TABLE_SIZE",
	http2.SettingEnablePush:           "ENABLE_PUSH",
	http2.SettingMaxConcurrentStreams: "MAX_CONCURRENT_STREAMS",
	http2.SettingInitialWindowSize:    "INITIAL_WINDOW_SIZE",
	http2.SettingMaxFrameSize:         "MAX_FRAME_SIZE",
	http2.SettingMaxHeaderListSize:    "MAX_HEADER_LIST_SIZE",
	0x8:                               "ENABLE_CONNECT_PROTOCOL",
	0x9:                               "NO_RFC7540_PRIORITIES",
}

// maxH2Frames bounds how many frames are read while waiting for SETTINGS and the first WINDOW_UPDATE.
const maxH2Frames = 8

// ProbeH2Settings opens an h2 connection, sends the preface and an empty SETTINGS, and reads the
// server's SETTINGS frame (always its first frame) and a connection WINDOW_UPDATE if one follows.
func (p *Prober) ProbeH2Settings(ctx context.Context) (*H2Settings, error) {
	c, err := p.dialTLS(ctx, []string{"h2"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		return nil, errors.New("server did not select h2")
	}
	_ = c.SetDeadline(time.Now().Add(stepTimeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil, err
	}
	fr := http2.NewFramer(c, c)
	fr.SetMaxReadFrameSize(1 << 16)
	if err := fr.WriteSettings(); err != nil {
		return nil, err
	}
	out := &H2Settings{Values: map[string]uint32{}, ConnectionWindow: 65535}
	gotSettings := false
	for i := 0; i < maxH2Frames; i++ {
		f, err := fr.ReadFrame()
		if err != nil {
			if gotSettings {
				return out, nil // no WINDOW_UPDATE within the deadline: the window stays 65535
			}
			return nil, fmt.Errorf("reading SETTINGS: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if gotSettings {
				return out, nil
			}
			gotSettings = true
			_ = f.ForeachSetting(func(s http2.Setting) error {
				name, ok := settingNames[s.ID]
				if !ok {
					name = fmt.Sprintf("0x%x", uint16(s.ID))
				}
				out.Values[name] = s.Val
				return nil
			})
			_ = fr.WriteSettingsAck()
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 && gotSettings {
				out.ConnectionWindow += f.Increment
				return out, nil
			}
		case *http2.GoAwayFrame:
			return nil, fmt.Errorf("server sent GOAWAY (%v)", f.ErrCode)
		}
	}
	if !gotSettings {
		return nil, fmt.Errorf("no SETTINGS in the first %d frames", maxH2Frames)
	}
	return out, nil
}

// maxBodyRead caps what the HTTP step reads of the body: it needs the headers only.
const maxBodyRead = 64 << 10

// ProbeHTTP GETs the probe's path (h2 when offered) and reports status, Server and Alt-Svc.
func (p *Prober) ProbeHTTP(ctx context.Context) (*HTTPInfo, error) {
	dialer := &net.Dialer{Timeout: stepTimeout}
	tr := &http.Transport{TLSClientConfig: p.tlsConfig(nil), ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: stepTimeout, ResponseHeaderTimeout: stepTimeout, MaxResponseHeaderBytes: 64 << 10,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, p.Target.Addr.String()) // the target, whatever the SNI resolves to
		}}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 2*stepTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyRead))
	alt := resp.Header.Get("Alt-Svc")
	return &HTTPInfo{Status: resp.StatusCode, Proto: resp.Proto, Server: resp.Header.Get("Server"), AltSvc: alt,
		H3: strings.Contains(alt, "h3=") || strings.Contains(alt, "h3-"), ContentLength: resp.ContentLength}, nil
}

const userAgent = "tailor-probe/1"

func (p *Prober) url() string {
	host := p.SNI
	if host == "" {
		host = p.Target.Addr.Addr().String()
		if p.Target.Addr.Addr().Is6() {
			host = "[" + host + "]"
		}
	}
	scheme := "https"
	if p.Plain {
		scheme = "http"
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, p.Target.Addr.Port(), p.Path)
}
