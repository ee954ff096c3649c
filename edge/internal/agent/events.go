package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/bpf"
	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// flushRecords flushes the sink early when this many records are pending.
const flushRecords = 4096

// ReadEvents turns ring-buffer events into telemetry records until ctx ends
// or the reader closes. The program submits with BPF_RB_NO_WAKEUP, so the
// reader mostly wakes on its deadline (FlushEvery) and drains in bulk.
func (a *Agent) ReadEvents(ctx context.Context, sink telemetry.Sink) error {
	boot := monotonicOffset()
	var rec ringbuf.Record
	pending, lastFlush := 0, time.Now()
	for {
		a.reader.SetDeadline(time.Now().Add(a.cfg.FlushEvery))
		err := a.reader.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrClosed):
			return telemetry.FlushFinal(ctx, sink)
		case err != nil:
			return fmt.Errorf("%w: read events: %v", ErrAgent, err)
		default:
			a.received.Add(1)
			if r, ok := a.record(rec.RawSample, boot); ok {
				if m := a.metrics.Load(); m != nil {
					m.observe(&r)
				}
				sink.Add(r)
				pending++
			}
		}
		if pending > 0 && (pending >= flushRecords || time.Since(lastFlush) >= a.cfg.FlushEvery || err != nil) {
			a.flush(ctx, sink)
			pending, lastFlush = 0, time.Now()
		}
		if ctx.Err() != nil && err != nil {
			return telemetry.FlushFinal(ctx, sink)
		}
	}
}

func (a *Agent) flush(ctx context.Context, sink telemetry.Sink) {
	if err := sink.Flush(ctx); err != nil {
		fmt.Fprintf(a.cfg.Log, "tailor-agent: telemetry: %v (buffered, dropped so far %d)\n", err, sink.Dropped())
	}
}

// monotonicOffset is wall time minus CLOCK_MONOTONIC (bpf_ktime_get_ns).
func monotonicOffset() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(time.Now().UnixNano() - ts.Nano())
}

// record turns one event into a "connection" record. Config, group,
// probability and holdback are the program's decision (spec/decision.md):
// the group is named for held-back connections too, the probability is the
// marginal one (p_nano / 1e9), holdback is the client's flag.
func (a *Agent) record(raw []byte, boot time.Duration) (telemetry.Record, bool) {
	var e bpf.SockopsEvent
	if _, err := binary.Decode(raw, binary.LittleEndian, &e); err != nil {
		return telemetry.Record{}, false
	}
	addr := netip.AddrFrom16(e.Raddr).Unmap()
	r := telemetry.Record{
		Time:              float64(time.Duration(e.CloseNs)+boot) / 1e9,
		Kind:              "connection",
		ConfigID:          fmt.Sprintf("c-%010x", e.Id40),
		TableVersion:      int64(e.Version),
		Probability:       telemetry.Ptr(float64(e.P_nano) / 1e9),
		Holdback:          telemetry.Ptr(e.Holdback != 0),
		SrttMs:            telemetry.Ptr(float64(e.SrttUs) / 1000),
		MinRttMs:          telemetry.Ptr(float64(e.MinRttUs) / 1000),
		BytesSent:         telemetry.Ptr(int64(e.BytesSent)),
		BytesAcked:        telemetry.Ptr(int64(e.BytesAcked)),
		BytesRetrans:      telemetry.Ptr(int64(e.BytesRetrans)),
		Retransmits:       telemetry.Ptr(int64(e.Retransmits)),
		Delivered:         telemetry.Ptr(int64(e.Delivered)),
		MaxDeliveryRate:   telemetry.Ptr(float64(e.MaxRate)),
		DurationMs:        telemetry.Ptr(float64(e.DurationNs) / 1e6),
		Cwnd:              telemetry.Ptr(int64(e.Cwnd)),
		MSS:               telemetry.Ptr(int64(e.Mss)),
		CongestionControl: cString(e.Cc[:]),
	}
	r.ClientPrefix, r.ClientAddr = a.clientPrefix(addr)
	if e.Group != groupNone && e.Version != 0 {
		r.Group = a.groupID(int64(e.Version), e.Group)
	}
	return r, true
}

func (a *Agent) clientPrefix(addr netip.Addr) (prefix, full string) {
	bits := 64
	if addr.Is4() {
		bits = 24
	}
	p, _ := addr.Prefix(bits)
	if a.cfg.FullAddress { // as tailor-edge: the address besides the prefix, never instead of it
		full = addr.String()
	}
	return p.String(), full
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
