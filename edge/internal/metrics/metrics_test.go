package metrics

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBoundedOverflow(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBounded(reg, "t_decisions", "test", "group", "config", 3)
	for i, g := range []string{"a", "b", "c", "d", "e", "a", "d"} {
		for range i + 1 {
			b.Inc(g, "c-0000000001")
		}
	}
	for _, c := range []struct {
		g    string
		want float64
	}{{"a", 1 + 6}, {"b", 2}, {"c", 3}, {Other, 4 + 5 + 7}} {
		if got := testutil.ToFloat64(b.vec.WithLabelValues(c.g, map[bool]string{true: Other, false: "c-0000000001"}[c.g == Other])); got != c.want {
			t.Errorf("%s: %v, want %v", c.g, got, c.want)
		}
	}
	if got := testutil.ToFloat64(b.overflow); got != 4+5+7 {
		t.Errorf("overflow %v, want 16", got)
	}
	if n := testutil.CollectAndCount(b.vec); n != 4 {
		t.Errorf("%d series, want 3 pairs and the overflow pair", n)
	}
}

func TestListenServesReadOnly(t *testing.T) {
	if _, err := Listen("no-port"); err == nil || !strings.Contains(err.Error(), `--metrics "no-port": want HOST:PORT`) {
		t.Fatalf("bad address: %v", err)
	}
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	CounterFunc(s.Registry, "t_things_total", "test", func() float64 { return 42 })
	if _, err := Listen(s.Addr()); err == nil || !strings.Contains(err.Error(), "--metrics "+s.Addr()) {
		t.Errorf("address in use: %v", err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + s.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "t_things_total 42") || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("GET %s: %s\n%.300s", Path, resp.Status, body)
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, "http://"+s.Addr()+Path, nil)
		if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %v %v", m, resp.Status, err)
		}
	}
	if resp, err := c.Get("http://" + s.Addr() + "/debug/pprof/"); err != nil || resp.StatusCode != 404 {
		t.Errorf("other path: %v %v", resp.Status, err)
	}
}
