package link

// Histogram bucket layout: 1 µs buckets below 2 ms, 100 µs buckets up to
// 200 ms, and one overflow bucket; Max is exact.
const (
	fineBuckets   = 2000
	coarseBuckets = 1980
	coarseStepUS  = 100
)

// Hist is an allocation-free latency histogram in microseconds.
type Hist struct {
	b     [fineBuckets + coarseBuckets + 1]int64
	n     int64
	maxUS int64
}

// Add records one sample in nanoseconds (negative counts as 0).
func (h *Hist) Add(ns int64) {
	us := max(ns, 0) / 1000
	h.n++
	h.maxUS = max(h.maxUS, us)
	switch {
	case us < fineBuckets:
		h.b[us]++
	case us < fineBuckets+coarseBuckets*coarseStepUS:
		h.b[fineBuckets+(us-fineBuckets)/coarseStepUS]++
	default:
		h.b[len(h.b)-1]++
	}
}

// Quantile returns the upper edge (µs) of the bucket holding quantile q.
func (h *Hist) Quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	var seen int64
	for i, c := range h.b {
		if seen += c; seen >= rank {
			return min(float64(bucketTop(i)), float64(h.maxUS))
		}
	}
	return float64(h.maxUS)
}

func bucketTop(i int) int64 {
	if i < fineBuckets {
		return int64(i)
	}
	return fineBuckets + int64(i-fineBuckets+1)*coarseStepUS
}

// Latency is the JSON summary of a Hist.
type Latency struct {
	N    int64   `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

// Summary computes the percentiles.
func (h *Hist) Summary() Latency {
	return Latency{N: h.n, P50: h.Quantile(0.5), P90: h.Quantile(0.9),
		P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: float64(h.maxUS)}
}
