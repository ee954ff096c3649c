package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// MaxTableBytes bounds a fetched decision table (tables carry up to
// hundreds of thousands of rules).
const MaxTableBytes = 64 << 20

// ErrSource: the table file or URL could not be read.
var ErrSource = errors.New("table source")

// Source reads a decision table from a file or an http(s) URL and reports
// only changes: a conditional GET (If-None-Match) for URLs, and a content
// hash for both, so an unchanged table is never re-provisioned. Shared by
// tailor-agent and tailor-edge.
type Source struct {
	Loc    string       // file path or http(s) URL
	Client *http.Client // default: 10 s timeout

	etag   string   // last ETag (URL)
	digest [32]byte // hash of the last table returned
}

// Fetch returns the table bytes, or nil when unchanged since the last call.
func (s *Source) Fetch(ctx context.Context) ([]byte, error) {
	var data []byte
	var err error
	if strings.HasPrefix(s.Loc, "http://") || strings.HasPrefix(s.Loc, "https://") {
		data, err = s.get(ctx)
	} else {
		data, err = os.ReadFile(s.Loc)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSource, err)
	}
	if data == nil {
		return nil, nil
	}
	d := sha256.Sum256(data)
	if d == s.digest {
		return nil, nil
	}
	s.digest = d
	return data, nil
}

// get does a conditional GET; a 304 returns nil data.
func (s *Source) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Loc, nil)
	if err != nil {
		return nil, err
	}
	if s.etag != "" {
		req.Header.Set("If-None-Match", s.etag)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.Loc, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxTableBytes+1))
	if err == nil && len(data) > MaxTableBytes {
		err = fmt.Errorf("GET %s: larger than %d bytes", s.Loc, MaxTableBytes)
	}
	if err != nil {
		return nil, err
	}
	s.etag = resp.Header.Get("ETag")
	return data, nil
}

func (s *Source) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}
