package agent

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tailor-project/tailor/edge/internal/bpf"
)

// Counter indexes after the per-knob apply errors: enum counter in
// sockops.bpf.c, read from the generated bindings.
const (
	cTuned       = int(bpf.SockopsCounterC_TUNED)
	cMiss        = int(bpf.SockopsCounterC_MISS)
	cEvents      = int(bpf.SockopsCounterC_EVENTS)
	cEventsLost  = int(bpf.SockopsCounterC_EVENTS_LOST)
	cStorageFail = int(bpf.SockopsCounterC_STORAGE_FAIL)
	cPendingHit  = int(bpf.SockopsCounterC_PENDING_HIT)
	cHoldback    = int(bpf.SockopsCounterC_HOLDBACK)
	cNum         = int(bpf.SockopsCounterC_NUM)
)

// Stats are the program's counters summed over CPUs, plus the reader's.
type Stats struct {
	Tuned       uint64            // connections configured at ESTABLISHED
	Miss        uint64            // connections no rule matched (the default configuration)
	Events      uint64            // events submitted to the ring buffer
	EventsLost  uint64            // events lost because the ring buffer was full
	StorageFail uint64            // sk_storage allocation failures (no telemetry)
	PendingHit  uint64            // connections that reused their TIMEOUT_INIT draw (tables without a salt)
	Holdback    uint64            // connections whose client is held back (matched or not; spec/decision.md)
	Received    uint64            // events read by the agent
	ApplyErrors map[string]uint64 // failed bpf_setsockopt calls per knob
}

// Stats reads the counters.
func (a *Agent) Stats() (Stats, error) {
	sums := make([]uint64, cNum)
	for i := range sums {
		var per []uint64
		if err := a.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return Stats{}, fmt.Errorf("%w: counters: %v", ErrAgent, err)
		}
		for _, v := range per {
			sums[i] += v
		}
	}
	s := Stats{Tuned: sums[cTuned], Miss: sums[cMiss], Events: sums[cEvents], EventsLost: sums[cEventsLost],
		StorageFail: sums[cStorageFail], PendingHit: sums[cPendingHit], Holdback: sums[cHoldback],
		Received: uint64(a.received.Load()), ApplyErrors: map[string]uint64{}}
	for i, name := range KnobNames {
		if sums[i] > 0 {
			s.ApplyErrors[name] = sums[i]
		}
	}
	return s, nil
}

func (s Stats) String() string {
	var errs []string
	for k, v := range s.ApplyErrors {
		errs = append(errs, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(errs)
	return fmt.Sprintf("tuned=%d default=%d holdback=%d syn_draws_reused=%d events=%d received=%d lost=%d storage_fail=%d apply_errors={%s}",
		s.Tuned, s.Miss, s.Holdback, s.PendingHit, s.Events, s.Received, s.EventsLost, s.StorageFail, strings.Join(errs, " "))
}

// CostHistogram returns per-callback cost bucket counts ([0] established,
// [1] close), bucket i covering [i*64, (i+1)*64) ns; the last is open.
func (a *Agent) CostHistogram() ([2][64]uint64, error) {
	var h [2][64]uint64
	for i := 0; i < 128; i++ {
		var per []uint64
		if err := a.objs.Cost.Lookup(uint32(i), &per); err != nil {
			return h, fmt.Errorf("%w: cost: %v", ErrAgent, err)
		}
		for _, v := range per {
			h[i/64][i%64] += v
		}
	}
	return h, nil
}

// AvgRunNs is the program's mean run time per invocation (all callbacks)
// from BPF_ENABLE_STATS, or 0 when statistics are off.
func (a *Agent) AvgRunNs() float64 {
	st, err := a.objs.TailorSockops.Stats()
	if err != nil || st.RunCount == 0 {
		return 0
	}
	return float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
}
