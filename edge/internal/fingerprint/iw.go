package fingerprint

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"
)

// IWResult is the server's initial congestion window as seen in its first response flight.
type IWResult struct {
	Segments          int     `json:"segments"`           // data segments before the server needed an ACK
	Bytes             int     `json:"bytes"`              // their payload bytes
	MSS               int     `json:"mss"`                // the server's segment payload size
	ClientMSS         int     `json:"client_mss"`         // TCP_MAXSEG the probe set (the MSS option of its SYN)
	FlightUS          float64 `json:"flight_us"`          // first to last segment of the flight
	RTTUS             float64 `json:"rtt_us"`             // the probe's smoothed RTT when it sent the request
	HandshakeSegments int     `json:"handshake_segments"` // server data segments acknowledged before the request
	TLPExcluded       bool    `json:"tlp_excluded"`       // a lone late segment (tail loss probe) was not counted
	Retransmission    bool    `json:"retransmission"`     // the flight ended with the server's retransmission
	LowerBound        bool    `json:"lower_bound"`        // the response ended inside the flight: IW >= Segments
	Method            string  `json:"method"`             // "cleartext" or "tls" (see the note)
	Trials            []int   `json:"trials,omitempty"`   // every trial's count; this result is the best trial
	Note              string  `json:"note,omitempty"`
}

const (
	maxFlightSegments = 4000            // counting stops here (IW above this is reported as a lower bound)
	iwWait            = 3 * time.Second // for the server's retransmission after the request
	tlpMinGap         = time.Millisecond
)

// flight is what analyzeFlight makes of the server's packets after the request.
type flight struct {
	segments, bytes, mss int
	duration             time.Duration
	tlp, retrans, fin    bool
}

// analyzeFlight counts the distinct data segments from the first response byte until the first
// retransmission. A tail loss probe (one new segment sent a PTO = 2 RTT + 2 jiffies after the
// flight) is not part of the window: a lone one-segment packet at the end, at least tlpMinGap and
// three times the largest earlier gap after its predecessor, is left out.
func analyzeFlight(pkts []segment, startSeq uint32) flight {
	var f flight
	var news []segment
	high := startSeq
	for _, p := range pkts {
		if p.Flags&flagRST != 0 {
			break
		}
		if p.Payload == 0 {
			f.fin = f.fin || p.Flags&flagFIN != 0
			continue
		}
		if int32(p.Seq-high) < 0 { // starts below what was already sent: a retransmission
			f.retrans = true
			break
		}
		news = append(news, p)
		high = p.Seq + uint32(p.Payload)
		f.fin = f.fin || p.Flags&flagFIN != 0
	}
	if n := len(news); n >= 2 && news[n-1].segs() == 1 {
		last := news[n-1].At.Sub(news[n-2].At)
		var maxGap time.Duration
		for i := 1; i < n-1; i++ {
			maxGap = max(maxGap, news[i].At.Sub(news[i-1].At))
		}
		if last >= tlpMinGap && last >= 3*maxGap {
			f.tlp = true
			news = news[:n-1]
		}
	}
	for _, p := range news {
		f.segments += p.segs()
		f.bytes += p.Payload
		if p.GSOSize > 0 {
			f.mss = max(f.mss, p.GSOSize)
		} else {
			f.mss = max(f.mss, p.Payload)
		}
	}
	if len(news) > 0 {
		f.duration = news[len(news)-1].At.Sub(news[0].At)
	}
	return f
}

// MeasureIW fetches the probe's path over HTTP/1.1 on a connection whose MSS is p.MSS, with the
// probe's ACKs dropped from the moment the request is written, and counts the server's flight.
func (p *Prober) MeasureIW(ctx context.Context, env *rawEnv, protos []string, contentLength int64) (*IWResult, error) {
	sock, capt, err := p.open(env, p.MSS)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	defer capt.Close()
	dst := p.Target.Addr
	if err := sock.connect(dst, stepTimeout); err != nil {
		return nil, err
	}
	nc, err := sock.conn()
	if err != nil {
		return nil, err
	}
	defer nc.Close() // SO_LINGER 0: a RST, which the filter lets through
	lport := int(sock.local.Port())
	defer env.filter.Release(lport, int(dst.Port()))
	_ = nc.SetDeadline(time.Now().Add(stepTimeout + iwWait))
	var w io.Writer = nc
	if !p.Plain {
		tc := tls.Client(nc, p.tlsConfig(protos))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		w = tc
	}
	tHandshake := time.Now()
	rtt := rttMicros(nc)
	time.Sleep(settleTime(rtt))
	if err := env.filter.Drop(lport, int(dst.Port())); err != nil {
		return nil, fmt.Errorf("ack filter: %w", err)
	}
	tReq := time.Now()
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nAccept: */*\r\nConnection: close\r\n\r\n",
		p.Path, p.hostHeader(), userAgent)
	if _, err := io.WriteString(w, req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	pkts, hs, startSeq, err := collectFlight(capt, tHandshake, tReq)
	if err != nil {
		return nil, err
	}
	f := analyzeFlight(pkts, startSeq)
	r := iwResult(f, p.MSS, rtt, hs, contentLength)
	r.Method = "cleartext"
	if !p.Plain {
		r.Method = "tls"
		if hs > 0 && r.Note == "" {
			r.Note = fmt.Sprintf("the TLS handshake delivered %d server segments first: a server that grows its window on every ACK (BBR) shows IW + %d, CUBIC/Reno show IW when it is at least twice their largest flight; --plain on a cleartext port is exact", hs, hs)
		}
	}
	return r, nil
}

// settleTime is how long the probe waits between the handshake and the request: the session
// tickets follow the handshake by one RTT and should arrive and be acknowledged first (the request
// acknowledges everything received anyway).
func settleTime(rttUS float64) time.Duration {
	return max(20*time.Millisecond, 4*time.Duration(rttUS)*time.Microsecond)
}

// collectFlight reads the connection's packets: those before tReq belong to the handshake (their
// segments are counted), the rest until the first retransmission (or iwWait, or maxFlightSegments)
// is the response flight, which starts at startSeq.
func collectFlight(capt *capture, tHandshake, tReq time.Time) (pkts []segment, handshake int, startSeq uint32, err error) {
	var hsBefore, hsAfter, counted int
	var high uint32
	started := false
	for deadline := tReq.Add(iwWait); counted < maxFlightSegments; {
		s, ok, err := capt.next(deadline)
		if err != nil {
			return nil, 0, 0, err
		}
		if !ok {
			break
		}
		switch {
		case s.Flags&flagSYN != 0 || s.Payload == 0 && !started:
			continue
		case s.At.Before(tReq):
			if s.At.Before(tHandshake) {
				hsBefore += s.segs()
			} else {
				hsAfter += s.segs()
			}
			continue
		}
		pkts = append(pkts, s)
		if s.Payload == 0 {
			continue
		}
		if !started {
			started, startSeq, high = true, s.Seq, s.Seq
		}
		if int32(s.Seq-high) < 0 {
			break // a retransmission: the flight is over
		}
		high = s.Seq + uint32(s.Payload)
		counted += s.segs()
	}
	return pkts, hsBefore + hsAfter, startSeq, nil
}

func iwResult(f flight, clientMSS int, rtt float64, handshake int, contentLength int64) *IWResult {
	r := &IWResult{Segments: f.segments, Bytes: f.bytes, MSS: f.mss, ClientMSS: clientMSS,
		FlightUS: float64(f.duration.Microseconds()), RTTUS: rtt, HandshakeSegments: handshake,
		TLPExcluded: f.tlp, Retransmission: f.retrans}
	switch {
	case f.segments == 0:
		r.Note = "no response data arrived within the wait"
	case f.fin || (contentLength >= 0 && int64(f.bytes) >= contentLength):
		r.LowerBound = true
		r.Note = "the whole response fit in the flight: the window is at least this; probe a larger --path"
	case f.segments >= maxFlightSegments:
		r.LowerBound = true
		r.Note = fmt.Sprintf("counting stopped at %d segments", maxFlightSegments)
	case !f.retrans:
		r.Note = "the server did not retransmit within the wait; the count is what arrived"
	}
	return r
}
