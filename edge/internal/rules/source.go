package rules

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
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

// Signature headers of a table the manager serves: the standard base64 of
// the Ed25519 signature over the exact body bytes, and the signing key's id
// (KeyID). A file table's signature is in the sidecar file PATH+".sig".
const (
	SignatureHeader = "X-Tailor-Signature"
	KeyIDHeader     = "X-Tailor-Key-Id"
	SignatureSuffix = ".sig"
)

// ErrSource: the table file or URL could not be read.
var ErrSource = errors.New("table source")

// ErrRefused: the source served a table that was refused (bad or missing
// signature, too large). The same body is not fetched or reported again.
var ErrRefused = errors.New("table refused")

// TableKey is one Ed25519 public key that may sign tables.
type TableKey struct {
	ID  string // KeyID(Pub)
	Pub ed25519.PublicKey
}

// KeyID is the lowercase hex of the first 8 bytes of sha256 of the raw
// 32-byte public key (the manager's X-Tailor-Key-Id).
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadTableKeys reads --table-pubkey: one or more PEM "PUBLIC KEY" blocks
// (PKIX SubjectPublicKeyInfo, Ed25519); several allow key rotation.
func LoadTableKeys(path string) ([]TableKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []TableKey
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("%s: PEM block %q, want \"PUBLIC KEY\"", path, b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%s: a %T key, want Ed25519", path, k)
		}
		keys = append(keys, TableKey{ID: KeyID(pub), Pub: pub})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM \"PUBLIC KEY\" block", path)
	}
	return keys, nil
}

// ManagerClient is the HTTP client for the manager (tables and telemetry):
// timeout 10 s, and with caFile (PEM bundle) https:// URLs verify against
// those CAs instead of the system roots.
func ManagerClient(caFile string) (*http.Client, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	if caFile == "" {
		return c, nil
	}
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c.Transport = tr
	return c, nil
}

// Source reads a decision table from a file or an http(s) URL and reports
// only changes: a conditional GET (If-None-Match) for URLs, and a content
// hash for both, so an unchanged table is never re-provisioned. Shared by
// tailor-agent and tailor-edge.
//
// With Keys, a table is returned only if its signature verifies with one
// of them; otherwise Fetch returns an ErrRefused error once, and the body
// is remembered (its ETag is sent in If-None-Match, its digest compared),
// so the same refused table is neither downloaded again (when the server
// honours If-None-Match) nor reported again. A returned table the caller
// refuses (validation) is remembered the same way: Fetch never returns the
// same body twice in a row.
type Source struct {
	Loc    string       // file path or http(s) URL
	Client *http.Client // default: 10 s timeout
	Token  string       // "Authorization: Bearer" for URL GETs ("" = none)
	Keys   []TableKey   // nil: unsigned tables accepted

	// Signature and KeyID of the last table Fetch returned (with Keys: the
	// signature and the id of the key that verified it), for a cache.
	Signature, KeyID string

	etag   string   // last ETag (URL), of an accepted or a refused body
	digest [32]byte // hash of the last body (and signature) returned or refused
	tooBig string   // the last oversized table refused without an ETag: file size and mtime, or URL length and Last-Modified
}

// Fetch returns the table bytes, or nil when unchanged since the last call
// (or the same as the last refused table).
func (s *Source) Fetch(ctx context.Context) ([]byte, error) {
	var data []byte
	var sig, keyID string
	var err error
	if s.isURL() {
		data, sig, keyID, err = s.get(ctx)
	} else {
		data, sig, err = s.readFile()
	}
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrSource, err)
	}
	if data == nil {
		return nil, nil
	}
	h := sha256.New()
	h.Write(data)
	h.Write([]byte{0})
	h.Write([]byte(sig))
	var d [32]byte
	h.Sum(d[:0])
	if d == s.digest {
		return nil, nil
	}
	s.digest = d
	s.tooBig = "" // a later oversized table is refused (and reported) again, whatever its stamp
	if len(s.Keys) > 0 {
		id, err := s.verify(data, sig, keyID)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v (keeping the last good table)", ErrRefused, s.Loc, err)
		}
		keyID = id
	}
	s.Signature, s.KeyID = sig, keyID
	return data, nil
}

// IsURL: Loc is an http(s) URL (not a file).
func (s *Source) IsURL() bool { return s.isURL() }

func (s *Source) isURL() bool {
	return strings.HasPrefix(s.Loc, "http://") || strings.HasPrefix(s.Loc, "https://")
}

// readFile reads the table and, with Keys, its sidecar signature.
func (s *Source) readFile() (data []byte, sig string, err error) {
	f, err := os.Open(s.Loc)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	// an oversized file is refused once (ErrRefused, counted as a refusal) and not read again until it changes
	// (until 2026-12-07 it was read and reported as a source error at every poll; found by review)
	if fi, err := f.Stat(); err == nil && fi.Size() > MaxTableBytes {
		return nil, "", s.refuseLarge(fmt.Sprintf("%d|%d", fi.Size(), fi.ModTime().UnixNano()), fi.Size())
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxTableBytes+1))
	if err != nil {
		return nil, "", err
	}
	if len(data) > MaxTableBytes { // grew while being read
		return nil, "", fmt.Errorf("%w: %s: larger than %d bytes", ErrRefused, s.Loc, MaxTableBytes)
	}
	if len(s.Keys) > 0 {
		b, err := os.ReadFile(s.Loc + SignatureSuffix)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, "", err
		}
		sig = string(bytes.TrimSpace(b[:min(len(b), 1024)]))
	}
	return data, sig, nil
}

// get does a conditional GET; a 304 returns nil data.
func (s *Source) get(ctx context.Context) (data []byte, sig, keyID string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Loc, nil)
	if err != nil {
		return nil, "", "", err
	}
	if s.etag != "" {
		req.Header.Set("If-None-Match", s.etag)
	}
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return nil, "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, "", "", nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", "", fmt.Errorf("GET %s: %s", s.Loc, resp.Status)
	}
	etag := resp.Header.Get("ETag")
	if resp.ContentLength > MaxTableBytes {
		return nil, "", "", s.tooLarge(etag, resp.ContentLength, resp.Header.Get("Last-Modified"))
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, MaxTableBytes+1))
	if err != nil {
		return nil, "", "", err
	}
	if len(data) > MaxTableBytes {
		return nil, "", "", s.tooLarge(etag, int64(len(data)), resp.Header.Get("Last-Modified"))
	}
	s.etag = etag
	return data, resp.Header.Get(SignatureHeader), resp.Header.Get(KeyIDHeader), nil
}

// tooLarge refuses an oversized table; with an ETag it is remembered (sent
// in If-None-Match) and reported once; without one it is reported once per
// (length, Last-Modified), and the last good table's ETag is kept.
func (s *Source) tooLarge(etag string, n int64, lastModified string) error {
	if etag == "" {
		return s.refuseLarge(fmt.Sprintf("%d|%s", n, lastModified), n)
	}
	if etag == s.etag {
		return nil // already reported; the server ignored If-None-Match
	}
	s.etag = etag
	return fmt.Errorf("%w: GET %s: %d bytes, larger than %d", ErrRefused, s.Loc, n, MaxTableBytes)
}

// refuseLarge reports an oversized table once per stamp (nil: the same one again).
func (s *Source) refuseLarge(stamp string, n int64) error {
	if stamp == s.tooBig {
		return nil
	}
	s.tooBig = stamp
	return fmt.Errorf("%w: %s: %d bytes, larger than %d", ErrRefused, s.Loc, n, MaxTableBytes)
}

// verify checks sig (standard base64, 64 bytes) over data with the key
// named keyID, or with every key when none matches; it returns the id of
// the key that verified.
func (s *Source) verify(data []byte, sig, keyID string) (string, error) {
	if sig == "" {
		if s.isURL() {
			return "", fmt.Errorf("no %s header: unsigned table", SignatureHeader)
		}
		return "", fmt.Errorf("no signature in %s%s: unsigned table", s.Loc, SignatureSuffix)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return "", fmt.Errorf("signature is not the base64 of %d bytes", ed25519.SignatureSize)
	}
	for _, k := range s.Keys {
		if k.ID == keyID && ed25519.Verify(k.Pub, data, raw) {
			return k.ID, nil
		}
	}
	for _, k := range s.Keys {
		if ed25519.Verify(k.Pub, data, raw) {
			return k.ID, nil
		}
	}
	return "", fmt.Errorf("signature (key id %q) does not verify with any --table-pubkey key", truncate(keyID, 32))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func (s *Source) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}
