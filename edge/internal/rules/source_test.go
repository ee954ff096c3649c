package rules

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// writeKeys writes the public keys as PEM "PUBLIC KEY" blocks.
func writeKeys(t *testing.T, pubs ...ed25519.PublicKey) string {
	t.Helper()
	var out []byte
	for _, p := range pubs {
		der, err := x509.MarshalPKIXPublicKey(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	path := filepath.Join(t.TempDir(), "keys.pem")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func sign(priv ed25519.PrivateKey, body []byte) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(priv, body))
}

// tableServer serves body with the given signature headers; it honours
// If-None-Match, checks the bearer token when token != "" and counts the
// 200 answers.
type tableServer struct {
	mu           sync.Mutex
	body         []byte
	etag         string
	sig, keyID   string
	token        string
	oks, refused int
}

func (s *tableServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		s.refused++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.Header().Set("ETag", s.etag)
	if r.Header.Get("If-None-Match") == s.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if s.sig != "" {
		w.Header().Set(SignatureHeader, s.sig)
	}
	if s.keyID != "" {
		w.Header().Set(KeyIDHeader, s.keyID)
	}
	s.oks++
	_, _ = w.Write(s.body)
}

func (s *tableServer) set(body []byte, etag, sig, keyID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.etag, s.sig, s.keyID = body, etag, sig, keyID
}

func (s *tableServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oks
}

func TestSignedTables(t *testing.T) {
	pub, priv := newKey(t)
	_, otherPriv := newKey(t)
	keys, err := LoadTableKeys(writeKeys(t, pub))
	if err != nil || len(keys) != 1 || keys[0].ID != KeyID(pub) || len(keys[0].ID) != 16 {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	ts := &tableServer{token: "tok"}
	srv := httptest.NewServer(ts)
	defer srv.Close()
	src := &Source{Loc: srv.URL, Keys: keys, Token: "tok"}
	ctx := context.Background()

	v1 := []byte(`{"v":1}`)
	ts.set(v1, `"1"`, sign(priv, v1), KeyID(pub))
	if data, err := src.Fetch(ctx); err != nil || string(data) != string(v1) {
		t.Fatalf("signed table: %q, %v", data, err)
	}
	bad := []struct {
		name, sig, keyID, want string
	}{
		{"unsigned", "", "", "unsigned"},
		{"garbled", "!!not base64", KeyID(pub), "not the base64"},
		{"wrong key", sign(otherPriv, []byte(`{"v":3}`)), "0123456789abcdef", "does not verify"},
		{"signature of another body", sign(priv, v1), KeyID(pub), "does not verify"},
	}
	for i, b := range bad {
		body := []byte(`{"v":` + string(rune('2'+i)) + `}`)
		ts.set(body, `"bad`+b.name+`"`, b.sig, b.keyID)
		before := ts.count()
		data, err := src.Fetch(ctx)
		if data != nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %q, %v; want refused with %q", b.name, data, err, b.want)
		}
		// refused once: the next polls send its ETag and get 304
		for range 3 {
			if data, err := src.Fetch(ctx); data != nil || err != nil {
				t.Errorf("%s: refused table returned again: %q, %v", b.name, data, err)
			}
		}
		if got := ts.count() - before; got != 1 {
			t.Errorf("%s: downloaded %d times, want 1", b.name, got)
		}
	}
	if ts.refused != 0 {
		t.Errorf("%d GETs without the bearer token", ts.refused)
	}
	// without the token the manager refuses the GET
	if _, err := (&Source{Loc: srv.URL}).Fetch(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("GET without token: %v", err)
	}
}

// TestKeyRotation: with two keys in the file, a table signed by either
// verifies (with or without a matching key id).
func TestKeyRotation(t *testing.T) {
	oldPub, oldPriv := newKey(t)
	newPub, newPriv := newKey(t)
	keys, err := LoadTableKeys(writeKeys(t, oldPub, newPub))
	if err != nil || len(keys) != 2 {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
	ts := &tableServer{}
	srv := httptest.NewServer(ts)
	defer srv.Close()
	src := &Source{Loc: srv.URL, Keys: keys}
	for i, c := range []struct {
		priv  ed25519.PrivateKey
		keyID string
	}{{oldPriv, KeyID(oldPub)}, {newPriv, KeyID(newPub)}, {newPriv, ""}, {oldPriv, KeyID(newPub)}} {
		body := []byte(`{"v":` + string(rune('1'+i)) + `}`)
		ts.set(body, `"`+string(rune('a'+i))+`"`, sign(c.priv, body), c.keyID)
		if data, err := src.Fetch(context.Background()); err != nil || string(data) != string(body) {
			t.Errorf("case %d: %q, %v", i, data, err)
		}
	}
}

// TestSignedFileTable: a file table's signature is PATH.sig (base64,
// whitespace ignored); fixing the sidecar makes the same table acceptable.
func TestSignedFileTable(t *testing.T) {
	pub, priv := newKey(t)
	_, otherPriv := newKey(t)
	keys, err := LoadTableKeys(writeKeys(t, pub))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "table.json")
	body := []byte(`{"v":1}`)
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	src := &Source{Loc: path, Keys: keys}
	if _, err := src.Fetch(context.Background()); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), ".sig") {
		t.Fatalf("no sidecar: %v", err)
	}
	if data, err := src.Fetch(context.Background()); data != nil || err != nil {
		t.Fatalf("refused file reported again: %q %v", data, err)
	}
	if err := os.WriteFile(path+".sig", []byte(sign(otherPriv, body)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Fetch(context.Background()); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong-key sidecar: %v", err)
	}
	if err := os.WriteFile(path+".sig", []byte("  "+sign(priv, body)+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := src.Fetch(context.Background()); err != nil || string(data) != string(body) {
		t.Fatalf("signed file: %q, %v", data, err)
	}
	// unsigned source: accepted as before
	if data, err := (&Source{Loc: path}).Fetch(context.Background()); err != nil || data == nil {
		t.Fatalf("unsigned source: %q, %v", data, err)
	}
}

// TestLoadTableKeysErrors: bad key files are refused with a reason.
func TestLoadTableKeysErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, priv := newKey(t)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	cases := map[string]string{
		write("empty.pem", nil): "no PEM",
		write("priv.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})):           "PRIVATE KEY",
		write("junk.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")})): "asn1",
	}
	for path, want := range cases {
		if _, err := LoadTableKeys(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", filepath.Base(path), err, want)
		}
	}
}

// TestManagerCA: an https:// manager with a private CA verifies with
// --manager-ca, and not without.
func TestManagerCA(t *testing.T) {
	ts := &tableServer{}
	ts.set([]byte(`{"v":1}`), `"1"`, "", "")
	srv := httptest.NewTLSServer(ts)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	client, err := ManagerClient(ca)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := (&Source{Loc: srv.URL, Client: client}).Fetch(context.Background()); err != nil || data == nil {
		t.Fatalf("with --manager-ca: %q, %v", data, err)
	}
	plain, _ := ManagerClient("")
	if _, err := (&Source{Loc: srv.URL, Client: plain}).Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v", err)
	}
	if _, err := ManagerClient(filepath.Join(t.TempDir(), "none.pem")); err == nil {
		t.Error("missing CA file accepted")
	}
}

// TestOversizedTableRefusedOnce: a table over MaxTableBytes is a refusal
// (ErrRefused), reported once and not read again until it changes, from a
// file and from a URL without an ETag, and the URL's last good ETag is kept
// (until 2026-12-07 a file was read and reported as a source error at every
// poll, and a URL without an ETag was reported at every poll and made the
// edge forget its ETag; found by review).
func TestOversizedTableRefusedOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "table.json")
	if err := os.WriteFile(path, []byte(`{"v":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	src := &Source{Loc: path}
	if data, err := src.Fetch(ctx); err != nil || data == nil {
		t.Fatalf("first table: %q, %v", data, err)
	}
	if err := os.Truncate(path, MaxTableBytes+1); err != nil { // sparse: nothing is written
		t.Fatal(err)
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Fetch(ctx); !errors.Is(err, ErrRefused) || errors.Is(err, ErrSource) {
		t.Fatalf("oversized file: %v", err)
	}
	if data, err := src.Fetch(ctx); data != nil || err != nil {
		t.Fatalf("oversized file reported again: %d bytes, %v", len(data), err)
	}

	var mu sync.Mutex
	big, gets := false, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		gets++
		if !big {
			if r.Header.Get("If-None-Match") == `"good"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", `"good"`)
			_, _ = w.Write([]byte(`{"v":2}`))
			return
		}
		w.Header().Set("Content-Length", "67108865") // MaxTableBytes + 1, no ETag; the body is never read
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	web := &Source{Loc: srv.URL}
	if data, err := web.Fetch(ctx); err != nil || data == nil {
		t.Fatalf("first table: %q, %v", data, err)
	}
	mu.Lock()
	big = true
	mu.Unlock()
	if _, err := web.Fetch(ctx); !errors.Is(err, ErrRefused) {
		t.Fatalf("oversized body: %v", err)
	}
	if data, err := web.Fetch(ctx); data != nil || err != nil {
		t.Fatalf("oversized body reported again: %d bytes, %v", len(data), err)
	}
	mu.Lock()
	big = false
	mu.Unlock()
	if data, err := web.Fetch(ctx); data != nil || err != nil { // the good table's ETag was kept: 304
		t.Fatalf("after the oversized body: %q, %v", data, err)
	}
	// a good table, then another oversized one with the same stamp: refused and reported again
	if err := os.WriteFile(path, []byte(`{"v":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := src.Fetch(ctx); err != nil || string(data) != `{"v":3}` {
		t.Fatalf("good file after the oversized one: %q, %v", data, err)
	}
	if err := os.Truncate(path, MaxTableBytes+1); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, first.ModTime(), first.ModTime()); err != nil { // the first one's stamp
		t.Fatal(err)
	}
	if _, err := src.Fetch(ctx); !errors.Is(err, ErrRefused) {
		t.Fatalf("a second oversized file after a good one: %v", err)
	}
}
