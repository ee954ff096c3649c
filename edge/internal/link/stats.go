package link

// maxSeconds bounds the per-second delivery series (one day).
const maxSeconds = 86_400

// Stats are the counters of one direction.
type Stats struct {
	PacketsIn      int64   `json:"packets_in"`
	BytesIn        int64   `json:"bytes_in"`
	PacketsOut     int64   `json:"packets_out"`
	BytesOut       int64   `json:"bytes_out"`
	RandomDrops    int64   `json:"random_drops"`
	QueueDrops     int64   `json:"queue_drops"`
	QueueHWMPkts   int     `json:"queue_hwm_packets"`
	QueueHWMBytes  int     `json:"queue_hwm_bytes"`
	BytesOutPerSec []int64 `json:"bytes_out_per_s"` // by delivery time, from link start
	Lateness       Latency `json:"send_lateness_us"`
}

func (s *Stats) countOut(p Packet, start int64) {
	s.PacketsOut++
	s.BytesOut += int64(p.Size)
	sec := int((p.T - start) / 1e9)
	if sec < 0 || sec >= maxSeconds {
		return
	}
	for len(s.BytesOutPerSec) <= sec {
		s.BytesOutPerSec = append(s.BytesOutPerSec, 0)
	}
	s.BytesOutPerSec[sec] += int64(p.Size)
}
