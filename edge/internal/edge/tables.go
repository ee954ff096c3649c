package edge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

// maxTableBytes bounds a fetched decision table.
const maxTableBytes = 16 << 20

// tableSource reads a table from a file or URL, reporting only changes.
type tableSource struct {
	loc    string
	etag   string // last ETag (URL)
	last   []byte // last bytes read (file)
	client *http.Client
}

// fetch returns the table bytes, or nil when unchanged since the last call.
func (t *tableSource) fetch(ctx context.Context) ([]byte, error) {
	if !strings.HasPrefix(t.loc, "http://") && !strings.HasPrefix(t.loc, "https://") {
		data, err := os.ReadFile(t.loc)
		if err != nil || bytes.Equal(data, t.last) {
			return nil, err
		}
		t.last = data
		return data, nil
	}
	return t.fetchURL(ctx)
}

func (t *tableSource) fetchURL(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.loc, nil)
	if err != nil {
		return nil, err
	}
	if t.etag != "" {
		req.Header.Set("If-None-Match", t.etag)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", t.loc, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTableBytes+1))
	if err == nil && len(data) > maxTableBytes {
		err = fmt.Errorf("GET %s: larger than %d bytes", t.loc, maxTableBytes)
	}
	if err == nil {
		t.etag = resp.Header.Get("ETag")
	}
	return data, err
}

func (s *Server) setupTables() error {
	if s.cfg.Table == "" {
		return s.install(defaultTable(s.reg))
	}
	s.tables = &tableSource{loc: s.cfg.Table, client: &http.Client{Timeout: 10 * time.Second}}
	return s.Reload(context.Background())
}

// Reload fetches the table; an invalid or unreachable table leaves the
// last good one in force and returns the error (a *rules.FieldError inside).
func (s *Server) Reload(ctx context.Context) error {
	data, err := s.tables.fetch(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrTable, s.cfg.Table, err)
	}
	if data == nil {
		return nil
	}
	return s.LoadTable(data)
}

// LoadTable validates, provisions and atomically installs a table document.
func (s *Server) LoadTable(data []byte) error {
	t, err := rules.Parse(data, s.reg)
	if err != nil {
		return fmt.Errorf("%w: rejected: %w", ErrTable, err)
	}
	return s.install(t)
}

func (s *Server) install(t *rules.Table) error {
	p := provision(t, s.reg, s.base, s.h1)
	for id, cc := range p.Configs {
		for _, what := range cc.Inexact {
			s.Log.Printf("edge: table %d config %s: %s (x/net/http2 limit)", t.Version, id, what)
		}
	}
	s.plan.Store(p)
	return nil
}

func (s *Server) pollTables(ctx context.Context) {
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.Reload(ctx)
		if err != nil && err.Error() != last {
			s.Log.Printf("%v (keeping table version %d)", err, s.Plan().Table.Version)
		}
		last = fmt.Sprint(err)
	}
}
