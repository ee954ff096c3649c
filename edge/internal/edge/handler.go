package edge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"slices"
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
		if alt := s.altSvcFor(r); alt != "" {
			w.Header().Set("Alt-Svc", alt)
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// content serves files under Root and proxies everything else to Upstream.
// Files are read through an os.Root: no path (symlinks included) can
// reach outside Root, and no path with a component starting with "."
// (.git/config, .env) is served. With an Upstream, the root serves regular
// files only (a directory, "/" included, is the upstream's), and Root may be
// empty: a pure reverse proxy in front of an existing server.
func (s *Server) content() (http.Handler, error) {
	var files http.Handler
	if s.cfg.Root != "" {
		root, err := os.OpenRoot(s.cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("%w: --root: %v", ErrConfig, err)
		}
		s.root = root
		files = drainBody(http.FileServerFS(noDotFS{root.FS()}))
	}
	if s.cfg.Upstream == "" {
		return files, nil
	}
	u, err := url.Parse(s.cfg.Upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: --upstream %q is not a URL", ErrConfig, s.cfg.Upstream)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = upstreamTransport(s.cfg.UpstreamTimeout)
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		code := http.StatusBadGateway
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			code = http.StatusGatewayTimeout
		}
		s.Log.Printf("edge: upstream %s %s: %v", r.Method, r.URL.Path, err)
		w.WriteHeader(code)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if files != nil && s.inRoot(r.URL.Path) {
			files.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}), nil
}

// upstreamTransport bounds each step of a proxied request by d: dial, TLS
// handshake, and the wait for the response headers (a hanging upstream
// gives 504 after d). The body then streams without a total limit.
func upstreamTransport(d time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // the upstream is addressed directly
		DialContext:           (&net.Dialer{Timeout: d, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   d,
		ResponseHeaderTimeout: d,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   64,
		ForceAttemptHTTP2:     true,
	}
}

// hiddenPath: some component of the slash path p starts with "." (the
// root itself, ".", is not hidden).
func hiddenPath(p string) bool {
	for part := range strings.SplitSeq(p, "/") {
		if strings.HasPrefix(part, ".") && part != "." {
			return true
		}
	}
	return false
}

// noDotFS hides every name starting with "." (open and directory listings).
type noDotFS struct{ fs.FS }

func (f noDotFS) Open(name string) (fs.File, error) {
	if hiddenPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	file, err := f.FS.Open(name)
	if err != nil {
		if !errors.Is(err, fs.ErrPermission) { // e.g. os.Root's "path escapes from parent": a 404, not a 500
			err = &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		return nil, err
	}
	if d, ok := file.(fs.ReadDirFile); ok {
		if st, err := file.Stat(); err == nil && st.IsDir() {
			return noDotDir{d}, nil
		}
	}
	return file, nil
}

type noDotDir struct{ fs.ReadDirFile }

func (d noDotDir) ReadDir(n int) ([]fs.DirEntry, error) {
	entries, err := d.ReadDirFile.ReadDir(n)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return strings.HasPrefix(e.Name(), ".") }), err
}

// Seek and ReadAt reach the os.File below (http.ServeContent needs Seek).
func (d noDotDir) Seek(offset int64, whence int) (int64, error) {
	if sk, ok := d.ReadDirFile.(io.Seeker); ok {
		return sk.Seek(offset, whence)
	}
	return 0, errors.New("edge: seek not supported")
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

// inRoot: p names a regular file the static root serves (through the
// os.Root, so a symlink out of Root is not in it; dot paths are not either).
// Directories are not: in front of an upstream, "/" and every directory are
// the upstream's to answer (index pages, listings, redirects).
func (s *Server) inRoot(p string) bool {
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		clean = "."
	}
	if hiddenPath(clean) {
		return false
	}
	fi, err := s.root.Stat(clean)
	return err == nil && fi.Mode().IsRegular()
}

// measure times each response and reports it (kind "response").
func (s *Server) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serving.Add(1) // Server.Close waits for this response's record
		defer s.serving.Add(-1)
		rec := &responseRecorder{ResponseWriter: w, start: time.Now(), inject: s.cfg.InjectBeacon, writeTimeout: s.cfg.WriteTimeout}
		rec.rc = http.NewResponseController(w)
		rec.extendDeadline(rec.start)
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

	rc           *http.ResponseController
	writeTimeout time.Duration // per-write deadline (0 = none)
	deadlineSet  time.Time     // when the write deadline was last moved
}

// extendDeadline moves the connection's (HTTP/1) or stream's (h2) write
// deadline to now+writeTimeout, so a write that makes no progress for that
// long fails and the connection is cut (slow or stalled readers), while a
// long download that progresses is never cut. To keep this cheap it moves
// the deadline only when 1/16 of the timeout has passed since the last
// move. HTTP/3 has no write deadlines (the error is ignored).
func (w *responseRecorder) extendDeadline(now time.Time) {
	if w.writeTimeout <= 0 || now.Sub(w.deadlineSet) < w.writeTimeout/16 {
		return
	}
	w.deadlineSet = now
	_ = w.rc.SetWriteDeadline(now.Add(w.writeTimeout))
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
	now := time.Now()
	if w.first.IsZero() {
		w.first = now
	}
	w.extendDeadline(now)
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
