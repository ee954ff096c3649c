package fingerprint

import (
	"encoding/binary"
	"fmt"
	"time"
)

// SynAckResult is the server's SYN-ACK retransmission timeout and what its SYN-ACK carried.
type SynAckResult struct {
	InitRTOMS       float64 `json:"init_rto_ms"`             // first SYN-ACK to its first retransmission; 0 when none came
	SecondRTOMS     float64 `json:"second_rto_ms,omitempty"` // first to second retransmission (exponential backoff: 2x)
	Retransmissions int     `json:"retransmissions"`         // seen within the wait
	Window          uint16  `json:"window"`                  // the SYN-ACK's receive window (unscaled)
	MSS             int     `json:"mss"`                     // its MSS option (0: absent)
	WindowScale     int     `json:"window_scale"`            // -1: absent
	SACK            bool    `json:"sack_permitted"`          // SACK-permitted option
	Timestamps      bool    `json:"timestamps"`              // timestamp option
	Note            string  `json:"note,omitempty"`
}

// MeasureSynAckRTO connects with the probe's ACK of the SYN-ACK dropped, so the server keeps the
// connection half-open and retransmits its SYN-ACK; the gaps between copies are its timeouts.
// It waits up to wait for the first retransmission and, if one comes, for the second up to twice
// the first gap (capped at wait). Closing the socket sends a RST, which ends the server's request.
func (p *Prober) MeasureSynAckRTO(env *rawEnv, wait time.Duration) (*SynAckResult, error) {
	sock, capt, err := p.open(env, 0)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	defer capt.Close()
	dst := p.Target.Addr
	lport := int(sock.local.Port())
	if err := env.filter.Drop(lport, int(dst.Port())); err != nil {
		return nil, fmt.Errorf("ack filter: %w", err)
	}
	defer env.filter.Release(lport, int(dst.Port()))
	if err := sock.connect(dst, stepTimeout); err != nil {
		return nil, err
	}
	var times []time.Time
	r := &SynAckResult{WindowScale: -1}
	deadline := time.Now().Add(stepTimeout)
	for len(times) < 3 {
		s, ok, err := capt.next(deadline)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if s.Flags&(flagSYN|flagACK) != flagSYN|flagACK {
			continue
		}
		if len(times) == 0 {
			r.Window = s.Window
			parseSynOptions(s.Options, r)
			deadline = s.At.Add(wait)
		} else if len(times) == 1 {
			deadline = minTime(s.At.Add(2*s.At.Sub(times[0])+wait/4), times[0].Add(wait))
		}
		times = append(times, s.At)
	}
	if len(times) == 0 {
		return nil, fmt.Errorf("no SYN-ACK captured (is %s reached through another interface?)", dst)
	}
	r.Retransmissions = len(times) - 1
	if len(times) >= 2 {
		r.InitRTOMS = ms(times[1].Sub(times[0]))
	} else {
		r.Note = fmt.Sprintf("no retransmission within %v: the timeout is longer, or the server answered with a SYN cookie (no state, nothing to retransmit)", wait)
	}
	if len(times) >= 3 {
		r.SecondRTOMS = ms(times[2].Sub(times[1]))
	}
	return r, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// parseSynOptions reads MSS, window scale, SACK-permitted and timestamps from TCP options.
func parseSynOptions(o []byte, r *SynAckResult) {
	for i := 0; i < len(o); {
		kind := o[i]
		if kind == 0 {
			return
		}
		if kind == 1 {
			i++
			continue
		}
		if i+1 >= len(o) || o[i+1] < 2 || i+int(o[i+1]) > len(o) {
			return
		}
		l := int(o[i+1])
		switch {
		case kind == 2 && l == 4:
			r.MSS = int(binary.BigEndian.Uint16(o[i+2:]))
		case kind == 3 && l == 3:
			r.WindowScale = int(o[i+2])
		case kind == 4:
			r.SACK = true
		case kind == 8:
			r.Timestamps = true
		}
		i += l
	}
}
