package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// TestAltSvcPerGroup: a decision table keeps 127.0.0.2/32 off HTTP/3
// (http.alt_svc false: "Alt-Svc: clear") while 127.0.0.3/32 is offered it
// (h3=":PORT"). tailor-fetch from each address over HTTP/2 prints the
// header; a client that follows Alt-Svc as browsers do then fetches over
// HTTP/3 only in the advertised group, and the edge's QUIC decision for it
// is that group's configuration. curl, when installed, sees the same
// headers from the same two addresses.
func TestAltSvcPerGroup(t *testing.T) {
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]any{}
	off := map[string]any{"http.version": "2", "http.alt_svc": false}
	on := map[string]any{"http.version": "2"}
	id := reg.ConfigID
	table, _ := json.Marshal(map[string]any{"schema": "tailor.decision-table/v1", "version": 1, "generated_at": 1.0,
		"default": id(def), "configs": map[string]any{id(def): def, id(off): off, id(on): on},
		"groups": []any{
			map[string]any{"id": "tcp-only", "choices": []any{map[string]any{"config": id(off), "p": 1.0}}},
			map[string]any{"id": "h3-ok", "choices": []any{map[string]any{"config": id(on), "p": 1.0}}}},
		"rules": []any{map[string]any{"prefix": "127.0.0.2/32", "group": "tcp-only"},
			map[string]any{"prefix": "127.0.0.3/32", "group": "h3-ok"}}})
	addr, decided := serveEdge(t, table, make([]byte, 200000), false)
	_, port, _ := net.SplitHostPort(addr)
	url := "https://localhost:" + port + "/obj.bin"
	advertised := `h3=":` + port + `"; ma=86400`
	for _, c := range []struct {
		src, group, altSvc, next string // next: the protocol a client following Alt-Svc uses afterwards
		cfg                      string
	}{
		{"127.0.0.2", "tcp-only", "clear", "h2", id(off)},
		{"127.0.0.3", "h3-ok", advertised, "h3", id(on)},
	} {
		fetch := func(httpV string) Result {
			r, code, stderr := runFetch(t, "--http", httpV, "--insecure", "--local-addr", c.src,
				"--resolve", "localhost:127.0.0.1", "--timeout", "10s", url)
			if code != 0 || r.Error != "" {
				t.Fatalf("%s --http %s: exit %d, error %q, stderr %q", c.src, httpV, code, r.Error, stderr)
			}
			line, _ := json.Marshal(r)
			t.Logf("tailor-fetch --http %s --local-addr %s: %s", httpV, c.src, line)
			return r
		}
		r := fetch("2")
		if r.Protocol != "h2" || r.AltSvc != c.altSvc {
			t.Errorf("%s (%s): protocol %q Alt-Svc %q, want h2 and %q", c.src, c.group, r.Protocol, r.AltSvc, c.altSvc)
		}
		next := "2" // a client that follows Alt-Svc: h3 only when advertised
		if strings.HasPrefix(r.AltSvc, "h3=") {
			next = "3"
		}
		if r2 := fetch(next); r2.Protocol != c.next || r2.Bytes != 200000 {
			t.Errorf("%s (%s): the follow-up fetch went over %q (%d bytes), want %s", c.src, c.group, r2.Protocol, r2.Bytes, c.next)
		}
		if c.next == "h3" {
			select {
			case got := <-decided:
				if got != c.cfg {
					t.Errorf("%s: QUIC connection got config %s, want the group's %s", c.src, got, c.cfg)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s: no QUIC decision recorded", c.src)
			}
		}
		if _, err := exec.LookPath("curl"); err == nil {
			out, err := exec.Command("curl", "-sS", "-k", "--http2", "--max-time", "10", "--interface", c.src,
				"--resolve", "localhost:"+port+":127.0.0.1", "-D", "-", "-o", os.DevNull, url).Output()
			if err != nil {
				t.Fatalf("curl from %s: %v", c.src, err)
			}
			hdr := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(strings.ToLower(l), "alt-svc:") {
					hdr = strings.TrimSpace(l[len("alt-svc:"):])
				}
			}
			t.Logf("curl --interface %s: alt-svc: %s", c.src, hdr)
			if hdr != c.altSvc {
				t.Errorf("curl from %s: alt-svc %q, want %q", c.src, hdr, c.altSvc)
			}
		}
	}
	select {
	case got := <-decided:
		t.Errorf("a QUIC connection (config %s) came from the group kept on TCP", got)
	default:
	}
}
