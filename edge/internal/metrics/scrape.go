package metrics

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scraped is one parsed exposition (tests and tools read counters back).
type Scraped map[string]*dto.MetricFamily

// Scrape GETs a /metrics URL and parses it (10 s limit, 4 MiB bound).
func Scrape(url string) (Scraped, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, fmt.Errorf("%w: scrape: %v", ErrMetrics, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: scrape %s: %s", ErrMetrics, url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: scrape %s: %v", ErrMetrics, url, err)
	}
	return fams, nil
}

// Value sums the series of name whose labels include every given pair
// (label, value, label, value...): counters, gauges, and for a histogram
// NAME_count and NAME_sum. A name not exported is 0.
func (s Scraped) Value(name string, pairs ...string) float64 {
	base, part := name, ""
	for _, suf := range []string{"_count", "_sum"} {
		if f, ok := s[strings.TrimSuffix(name, suf)]; ok && strings.HasSuffix(name, suf) && f.GetType() == dto.MetricType_HISTOGRAM {
			base, part = strings.TrimSuffix(name, suf), suf
		}
	}
	f, ok := s[base]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if !hasLabels(m, pairs) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil && part == "_count":
			total += float64(m.Histogram.GetSampleCount())
		case m.Histogram != nil && part == "_sum":
			total += m.Histogram.GetSampleSum()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
