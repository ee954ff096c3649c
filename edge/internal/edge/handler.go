package edge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// BeaconPath receives page-load beacons (Navigation Timing JSON).
const BeaconPath = "/_tailor/beacon"

func (s *Server) handler() (http.Handler, error) {
	content, err := s.content()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+BeaconPath, s.beacon)
	mux.Handle("/", s.measure(content))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if alt, _ := s.altSvc.Load().(string); alt != "" && r.ProtoMajor < 3 {
			w.Header().Set("Alt-Svc", alt)
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// content serves files under Root and proxies everything else to Upstream.
func (s *Server) content() (http.Handler, error) {
	files := drainBody(http.FileServer(http.Dir(s.cfg.Root)))
	if s.cfg.Upstream == "" {
		return files, nil
	}
	u, err := url.Parse(s.cfg.Upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: --upstream %q is not a URL", ErrConfig, s.cfg.Upstream)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.inRoot(r.URL.Path) {
			files.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}), nil
}

// maxDrain bounds the request body read (and discarded) before a static
// file is served.
const maxDrain = 64 << 10

// drainBody reads a request body (up to maxDrain) before the file server
// answers, so HTTP/2 checks it against its content-length (a mismatch is
// a PROTOCOL_ERROR stream error, RFC 9113 8.1.1) instead of the response
// racing the DATA frames.
func drainBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) inRoot(p string) bool {
	_, err := os.Stat(filepath.Join(s.cfg.Root, filepath.FromSlash(path.Clean("/"+p))))
	return err == nil
}

// measure times each response and reports it (kind "response").
func (s *Server) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &responseRecorder{ResponseWriter: w, start: time.Now(), inject: s.cfg.InjectBeacon}
		next.ServeHTTP(rec, r)
		rec.finish()
		if s.sink != nil {
			s.sink.Add(s.responseRecord(r, rec))
			if c := connFrom(r.Context()); c != nil {
				c.noteResponse(r.ProtoMajor)
			}
		}
	})
}

// responseRecorder notes the first byte, counts bytes and, for HTML,
// appends the beacon snippet.
type responseRecorder struct {
	http.ResponseWriter
	start, first time.Time
	bytes        int64
	inject, html bool
	wroteHeader  bool
}

func (w *responseRecorder) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	w.html = w.inject && code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/html")
	if w.html {
		w.Header().Del("Content-Length")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseRecorder) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.first.IsZero() {
		w.first = time.Now()
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *responseRecorder) finish() {
	if w.html {
		_, _ = w.Write([]byte(beaconSnippet))
	}
	if w.first.IsZero() {
		w.first = time.Now()
	}
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *responseRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush keeps streaming responses (reverse proxy) streaming.
func (w *responseRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack is needed by the reverse proxy for protocol upgrades over HTTP/1.1.
func (w *responseRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("edge: hijack not supported")
}
