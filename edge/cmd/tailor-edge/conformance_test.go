package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/tailor-project/tailor/edge/internal/edge"
	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// These tests run the built binary against tools nobody here wrote. They
// are skipped with -short (they take tens of seconds) and, tool by tool,
// when the tool is not installed.

// h2specModule is the newest h2spec in the Go module proxy (2019; the
// module has no go.mod, hence +incompatible).
const h2specModule = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"

// h2specLibraryFailures are the h2spec cases golang.org/x/net/http2 fails
// by design (a stock net/http server fails the same ones); see README.
var h2specLibraryFailures = map[string]string{
	"6.5.3/1":   "x/net closes connections whose SETTINGS frame repeats a setting (server.go processSettings: HasDuplicates)",
	"8.1.2.2/1": "x/net answers a connection-specific request header with 400, not a PROTOCOL_ERROR stream error (checkValidHTTP2RequestHeaders)",
	"8.1.2.2/2": "x/net answers TE other than trailers with 400, not a PROTOCOL_ERROR stream error (checkValidHTTP2RequestHeaders)",
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance run against external tools; skipped with -short")
	}
}

func needTool(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// h2Table maps 127.0.0.0/8 with SNI localhost to an HTTP/2 config; every
// other client gets the HTTP/1.1 default. all2 maps every 127/8 client to h2.
func writeTable(t *testing.T, all2 bool) string {
	t.Helper()
	reg, err := knobs.Default()
	must(t, err)
	h11, h2 := map[string]any{}, map[string]any{"http.version": "2", "http2.max_concurrent_streams": 128, "tcp.nodelay": true}
	rule := map[string]any{"prefix": "127.0.0.0/8", "group": "g"}
	if !all2 {
		rule["sni"] = "localhost"
	}
	doc := map[string]any{"schema": "tailor.decision-table/v1", "version": 7, "generated_at": 1.0, "default": reg.ConfigID(h11),
		"configs": map[string]any{reg.ConfigID(h11): h11, reg.ConfigID(h2): h2},
		"groups":  []any{map[string]any{"id": "g", "choices": []any{map[string]any{"config": reg.ConfigID(h2), "p": 1.0}}}},
		"rules":   []any{rule}}
	b, err := json.Marshal(doc)
	must(t, err)
	path := filepath.Join(t.TempDir(), "table.json")
	must(t, os.WriteFile(path, b, 0o644))
	return path
}

// junitSuites is h2spec's -j report: a failing case has an <error>; the
// case number is its position in its section (as h2spec prints it).
type junitSuites struct {
	Suites []struct {
		Package string `xml:"package,attr"`
		Cases   []struct {
			Desc    string    `xml:"classname,attr"`
			Error   *string   `xml:"error"`
			Failure *string   `xml:"failure"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestConformanceH2spec runs the HTTP/2 conformance suite against the edge.
func TestConformanceH2spec(t *testing.T) {
	skipShort(t)
	gobin := needTool(t, "go")
	if out, err := exec.Command(gobin, "run", h2specModule, "--version").CombinedOutput(); err != nil {
		t.Skipf("h2spec cannot be fetched/built through the Go module proxy: %v\n%s", err, out)
	}
	p := startEdge(t, "--self-signed", "--table", writeTable(t, true))
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, gobin, "run", h2specModule, "-h", "127.0.0.1", "-p", p.Port, "-t", "-k", "-o", "3", "-j", report).CombinedOutput()
	summary := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindStringSubmatch(string(out))
	if summary == nil {
		t.Fatalf("no h2spec summary:\n%s", out)
	}
	t.Logf("h2spec: %s", summary[0])
	raw, err := os.ReadFile(report)
	must(t, err)
	var js junitSuites
	must(t, xml.Unmarshal(raw, &js))
	total, failed := 0, []string{}
	for _, su := range js.Suites {
		for i, c := range su.Cases {
			total++
			if c.Error == nil && c.Failure == nil {
				continue
			}
			id := strings.TrimPrefix(su.Package, "http2/") + "/" + strconv.Itoa(i+1)
			failed = append(failed, id)
			t.Logf("h2spec fails %s %q", su.Package+"/"+strconv.Itoa(i+1), c.Desc)
		}
	}
	n, _ := strconv.Atoi(summary[1])
	if total != n || n < 145 {
		t.Errorf("junit has %d cases, summary %d (want >= 145)", total, n)
	}
	for _, id := range failed {
		if _, ok := h2specLibraryFailures[id]; !ok {
			t.Errorf("h2spec case %s fails and is not a known x/net behaviour", id)
		}
	}
	if want, _ := strconv.Atoi(summary[4]); len(failed) != want {
		t.Errorf("report lists %d failures, summary %d", len(failed), want)
	}
}

// TestConformanceCurl: curl gets the HTTP version the table chooses (per
// SNI) and sees Alt-Svc with --quic.
func TestConformanceCurl(t *testing.T) {
	skipShort(t)
	curl := needTool(t, "curl")
	p := startEdge(t, "--self-signed", "--quic", "--table", writeTable(t, false))
	cases := []struct {
		name, host, flag, want string
	}{
		{"sni localhost -> h2", "localhost", "--http2", "2"},
		{"sni localhost, client wants 1.1", "localhost", "--http1.1", "1.1"},
		{"no sni (IP) -> default 1.1", "127.0.0.1", "--http2", "1.1"},
	}
	for _, c := range cases {
		out, err := exec.Command(curl, "-sk", c.flag, "--resolve", "localhost:"+p.Port+":127.0.0.1", "-D", "-", "-o", "/dev/null",
			"-w", "version=%{http_version} size=%{size_download}\n", "https://"+c.host+":"+p.Port+"/data.bin").Output()
		if err != nil {
			t.Fatalf("%s: curl: %v", c.name, err)
		}
		s := string(out)
		if !strings.Contains(s, "version="+c.want+" size=100000") || !strings.Contains(strings.ToLower(s), `alt-svc: h3=":`+p.Port+`"`) {
			t.Errorf("%s: curl output %q, want HTTP %s, 100000 bytes and Alt-Svc", c.name, s, c.want)
		}
	}
}

var h2loadReq = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)

// TestConformanceH2load loads the edge over HTTP/1.1 and HTTP/2 (bounded
// request count, loopback only).
func TestConformanceH2load(t *testing.T) {
	skipShort(t)
	h2load := needTool(t, "h2load")
	p := startEdge(t, "--self-signed", "--table", writeTable(t, true))
	for _, c := range []struct {
		name  string
		args  []string
		proto string
	}{
		{"HTTP/2", nil, "h2"},
		{"HTTP/1.1", []string{"--h1"}, "http/1.1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		args := append([]string{"-n", "3000", "-c", "10", "-m", "10", "-T", "10"}, c.args...)
		out, err := exec.CommandContext(ctx, h2load, append(args, "https://127.0.0.1:"+p.Port+"/index.html")...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: h2load: %v\n%s", c.name, err, out)
		}
		m := h2loadReq.FindStringSubmatch(string(out))
		if m == nil || m[4] != "3000" || m[5] != "0" || m[6] != "0" || !strings.Contains(string(out), "Application protocol: "+c.proto) {
			t.Errorf("%s: h2load output:\n%s", c.name, out)
		}
		if rps := regexp.MustCompile(`finished in .*?, ([0-9.]+) req/s`).FindStringSubmatch(string(out)); rps != nil {
			t.Logf("h2load %s: 3000 requests, 10 clients: %s req/s", c.name, rps[1])
		}
	}
}

// TestConformanceHTTP3Client: quic-go's HTTP/3 client fetches over QUIC.
func TestConformanceHTTP3Client(t *testing.T) {
	skipShort(t)
	p := startEdge(t, "--self-signed", "--quic", "--telemetry", "-", "--table", writeTable(t, true))
	tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + p.Addr + "/data.bin")
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	if resp.Proto != "HTTP/3.0" || len(body) != 100000 {
		t.Errorf("proto %s, %d bytes", resp.Proto, len(body))
	}
	recs := p.records(t) // the server stops with the QUIC connection open: closing it reports it
	kinds := map[string]int{}
	for _, r := range recs {
		kinds[r.Kind]++
		if r.ALPN != "h3" || r.SNI != "localhost" || r.HandshakeRttMs == nil {
			t.Errorf("record %+v", r)
		}
	}
	if len(recs) != 2 || kinds["response"] != 1 || kinds["connection"] != 1 {
		t.Errorf("records by kind %v, want one response and one connection", kinds)
	}
}

// certFiles writes a fresh self-signed certificate for localhost and
// returns the paths and Chromium's SPKI pin for it.
func certFiles(t *testing.T) (cert, key, spki string) {
	t.Helper()
	c, err := edge.SelfSigned()
	must(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	must(t, err)
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644))
	must(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	must(t, err)
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	return cert, key, base64.StdEncoding.EncodeToString(sum[:])
}

// TestConformanceChromium: headless Chromium loads a page over HTTP/2 and
// over HTTP/3, and the injected beacon reports its page-load time.
func TestConformanceChromium(t *testing.T) {
	skipShort(t)
	chromium := needTool(t, "chromium")
	for _, c := range []struct {
		name, alpn, fp string
		quic           bool
	}{
		{"HTTP/2", "h2", "t13", false},
		{"HTTP/3", "h3", "q13", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cert, key, spki := certFiles(t)
			p := startEdge(t, "--cert", cert, "--key", key, "--quic", "--inject-beacon", "--telemetry", "-", "--table", writeTable(t, true))
			args := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=" + t.TempDir(),
				"--ignore-certificate-errors-spki-list=" + spki, "--host-resolver-rules=MAP localhost 127.0.0.1",
				"--virtual-time-budget=3000", "--dump-dom"}
			if c.quic {
				args = append(args, "--enable-quic", "--origin-to-force-quic-on=localhost:"+p.Port)
			} else {
				args = append(args, "--disable-quic")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			dom, err := exec.CommandContext(ctx, chromium, append(args, "https://localhost:"+p.Port+"/")...).Output()
			if err != nil || !strings.Contains(string(dom), "tailor edge page") {
				t.Fatalf("chromium: %v, DOM %q", err, dom)
			}
			deadline := time.Now().Add(5 * time.Second) // the beacon is sent after load
			for time.Now().Before(deadline) && !p.hasPageload() {
				time.Sleep(100 * time.Millisecond)
			}
			kinds := map[string]int{}
			for _, r := range p.records(t) {
				kinds[r.Kind]++
				if r.ALPN != c.alpn || !strings.HasPrefix(r.TLSFingerprint, c.fp) || r.SNI != "localhost" {
					t.Errorf("record %s alpn=%s fp=%s sni=%s, want %s %s...", r.Kind, r.ALPN, r.TLSFingerprint, r.SNI, c.alpn, c.fp)
				}
				if r.Kind == "pageload" {
					t.Logf("%s pageload: plt_ms=%.1f handshake_rtt_ms=%v fp=%s", c.name, *r.PLTMs, deref(r.HandshakeRttMs), r.TLSFingerprint)
				}
			}
			if kinds["response"] < 1 || kinds["pageload"] != 1 || kinds["connection"] < 1 {
				t.Errorf("records by kind %v, want >= 1 response, 1 pageload, >= 1 connection", kinds)
			}
			t.Logf("%s records by kind %v", c.name, kinds)
		})
	}
}

// hasPageload peeks at telemetry written so far (the sink flushes every 2 s).
func (p *edgeProc) hasPageload() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Contains(p.stdout.String(), `"kind":"pageload"`)
}

func deref(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}
