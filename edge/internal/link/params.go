package link

import "math"

// OppBytes is the size of one trace delivery opportunity (mahimahi uses
// 1504 because it counts its 4-byte packet-info header; we count IP bytes).
const OppBytes = 1500

// Never is the time of an event that will not happen.
const Never = int64(math.MaxInt64)

// Params describes one direction of the link. The zero value is an
// unlimited, lossless, zero-delay link with an unlimited queue.
type Params struct {
	RateBps      int64   // fixed rate in bit/s; 0 = unlimited (unless Trace)
	Trace        *Trace  // trace-driven capacity; nil = use RateBps
	DelayNs      int64   // one-way propagation delay in ns; default 0
	Loss         float64 // i.i.d. drop probability on arrival, [0,1); default 0
	QueuePackets int     // droptail limit in packets; 0 = no packet limit
	QueueBytes   int     // droptail limit in bytes; 0 = no byte limit
	// TraceFromFirstPacket starts the trace clock at the first arrival
	// instead of at link start; default false.
	TraceFromFirstPacket bool
}
