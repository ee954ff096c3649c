package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxTableBytes bounds a fetched table.
const maxTableBytes = 64 << 20

// tableSource reads a table from a file or URL and reports whether it changed.
type tableSource struct {
	loc    string
	etag   string   // last ETag (URL)
	digest [32]byte // last content hash
	client *http.Client
}

func newTableSource(loc string) *tableSource {
	return &tableSource{loc: loc, client: &http.Client{Timeout: 10 * time.Second}}
}

func (s *tableSource) isURL() bool {
	return strings.HasPrefix(s.loc, "http://") || strings.HasPrefix(s.loc, "https://")
}

// fetch returns the table if it differs from the last one fetched.
func (s *tableSource) fetch(ctx context.Context) ([]byte, bool, error) {
	var data []byte
	var err error
	if s.isURL() {
		data, err = s.get(ctx)
	} else {
		data, err = os.ReadFile(s.loc)
	}
	if err != nil || data == nil {
		return nil, false, err
	}
	d := sha256.Sum256(data)
	if d == s.digest {
		return nil, false, nil
	}
	s.digest = d
	return data, true, nil
}

// get does a conditional GET; a 304 returns nil data.
func (s *tableSource) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.loc, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTableSource, err)
	}
	if s.etag != "" {
		req.Header.Set("If-None-Match", s.etag)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTableSource, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: %s", ErrTableSource, s.loc, resp.Status)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(resp.Body, maxTableBytes)); err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrTableSource, s.loc, err)
	}
	s.etag = resp.Header.Get("ETag")
	return buf.Bytes(), nil
}

// Refresh fetches the table once and installs it if it changed. On any
// error the installed table stays and the error is returned.
func (a *Agent) Refresh(ctx context.Context, src *tableSource) error {
	data, changed, err := src.fetch(ctx)
	if err == nil && changed {
		_, err = a.Load(data)
		if err == nil {
			fmt.Fprintf(a.cfg.Log, "tailor-agent: installed table version %d from %s\n", a.Version(), src.loc)
		}
	}
	if err != nil {
		a.setLastError(err)
		fmt.Fprintf(a.cfg.Log, "tailor-agent: keeping table version %d: %v\n", a.Version(), err)
		return err
	}
	if changed {
		a.setLastError(nil)
	}
	return nil
}

// PollTables refreshes the table every Config.Poll until ctx ends.
func (a *Agent) PollTables(ctx context.Context, src *tableSource) {
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = a.Refresh(ctx, src)
		}
	}
}
