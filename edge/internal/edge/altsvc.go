package edge

import "net/http"

// altSvcClear tells a client to forget every alternative service it cached
// for this origin (RFC 7838 section 3): a group the table keeps off HTTP/3
// stops using it even after an earlier table advertised it.
const altSvcClear = "clear"

// altSvcFor is the Alt-Svc header of a response to r: nothing without
// --quic or over HTTP/3 itself; otherwise the connection's configuration
// decides (http.alt_svc): h3=":PORT" when true, "clear" when false. A TCP
// connection without a decision (no TLS handshake seen) follows the
// table's default configuration.
func (s *Server) altSvcFor(r *http.Request) string {
	alt, _ := s.altSvc.Load().(string)
	if alt == "" || r.ProtoMajor >= 3 {
		return ""
	}
	conf := s.plan.Load().Default
	if st := stateFrom(r.Context()); st != nil && st.Conf != nil {
		conf = st.Conf
	}
	if conf == nil || conf.AltSvc {
		return alt
	}
	return altSvcClear
}
