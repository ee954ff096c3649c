package fingerprint

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the result as an aligned table: one row per finding, then what was skipped.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("target", r.Target+sniSuffix(r.SNI))
	if r.TLS != nil {
		row("tls", r.TLS.Version+" "+r.TLS.Cipher)
	}
	for _, t := range r.ALPN {
		row("alpn offer "+strings.Join(t.Offered, ","), alpnOutcome(t))
	}
	if r.HTTPVersion != "" {
		row("http version", r.HTTPVersion+" (offering h2,http/1.1)")
	}
	if r.HTTP2 != nil {
		row("http2 settings", settingsLine(r.HTTP2.Values))
		row("http2 connection window", fmt.Sprint(r.HTTP2.ConnectionWindow))
	}
	if h := r.HTTP; h != nil {
		row("http GET "+r.Path, fmt.Sprintf("%d %s, %s bytes, server %q", h.Status, h.Proto, lengthText(h.ContentLength), h.Server))
		row("h3 (alt-svc)", h3Text(h))
	}
	if iw := r.IW; iw != nil {
		row("initial window", iwText(iw))
		if iw.Note != "" {
			row("", "note: "+iw.Note)
		}
	}
	if s := r.SynAck; s != nil {
		row("syn-ack rto", synAckText(s))
		row("syn-ack options", fmt.Sprintf("window %d, mss %d, wscale %d, sack %v, timestamps %v",
			s.Window, s.MSS, s.WindowScale, s.SACK, s.Timestamps))
	}
	if r.CC != nil {
		g := r.CC.Guess
		if g == "" {
			g = "-"
		}
		row("congestion control", g+" ("+r.CC.Reason+")")
	}
	for _, s := range r.Skipped {
		row("skipped "+s.Step, s.Reason)
	}
	keys := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("error "+k, r.Errors[k])
	}
	return tw.Flush()
}

func sniSuffix(sni string) string {
	if sni == "" {
		return ""
	}
	return " (sni " + sni + ")"
}

func alpnOutcome(t ALPNTrial) string {
	switch {
	case t.Error != "":
		return "refused: " + t.Error
	case t.Selected == "":
		return "accepted without ALPN"
	default:
		return t.Selected
	}
}

func settingsLine(v map[string]uint32) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, v[k])
	}
	if len(parts) == 0 {
		return "(empty: all defaults)"
	}
	return strings.Join(parts, " ")
}

func lengthText(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func h3Text(h *HTTPInfo) string {
	if !h.H3 {
		return "not advertised"
	}
	return "advertised: " + h.AltSvc
}

func iwText(iw *IWResult) string {
	ge := ""
	if iw.LowerBound {
		ge = ">= "
	}
	s := fmt.Sprintf("%s%d segments (%d bytes, server MSS %d, probe MSS option %d; flight %.0f us, rtt %.0f us)",
		ge, iw.Segments, iw.Bytes, iw.MSS, iw.ClientMSS, iw.FlightUS, iw.RTTUS)
	if iw.TLPExcluded {
		s += ", a tail loss probe not counted"
	}
	if len(iw.Trials) > 1 {
		s += fmt.Sprintf("; trials %v", iw.Trials)
	}
	return s
}

func synAckText(s *SynAckResult) string {
	if s.Retransmissions == 0 {
		return "no retransmission seen: " + s.Note
	}
	t := fmt.Sprintf("%.0f ms", s.InitRTOMS)
	if s.SecondRTOMS > 0 {
		t += fmt.Sprintf(" (then %.0f ms)", s.SecondRTOMS)
	}
	return t
}
