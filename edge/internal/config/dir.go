package config

import (
	"errors"
	"fmt"

	"github.com/tailor-project/tailor/edge/internal/link"
)

// resolveDir validates one direction; name is "down" or "up".
func resolveDir(name string, d *Dir, f *File) (link.Params, error) {
	var p link.Params
	p.TraceFromFirstPacket = f.TraceFromFirstPacket
	if err := resolveCapacity(name, d, &p); err != nil {
		return p, err
	}
	if err := resolveDelayLoss(name, d, f, &p); err != nil {
		return p, err
	}
	return p, resolveQueue(name, d, f, &p)
}

func resolveCapacity(name string, d *Dir, p *link.Params) error {
	if d.RateMbit != nil && d.Trace != nil {
		return invalid(name+".rate_mbit", "--"+name+"-rate-mbit", "set either a rate or a trace, not both")
	}
	if d.RateMbit != nil {
		r := *d.RateMbit
		if !finite(r) || r <= 0 || r > 100_000 {
			return invalid(name+".rate_mbit", "--"+name+"-rate-mbit", fmt.Sprintf("must be > 0 and ≤ 100000, got %v", r))
		}
		p.RateBps = int64(r*1e6 + 0.5)
	}
	if d.Trace != nil {
		tr, err := link.LoadTrace(*d.Trace)
		if err != nil {
			return invalid(name+".trace", "--"+name+"-trace", err.Error())
		}
		p.Trace = tr
	}
	return nil
}

func resolveDelayLoss(name string, d *Dir, f *File, p *link.Params) error {
	delay := deref(d.DelayMS, deref(f.DelayMS, 0))
	if !finite(delay) || delay < 0 || delay > 60_000 {
		return invalid(name+".delay_ms", "--delay/--"+name+"-delay", fmt.Sprintf("must be in [0, 60000] ms, got %v", delay))
	}
	p.DelayNs = int64(delay*1e6 + 0.5)
	loss := deref(d.Loss, 0)
	if !finite(loss) || loss < 0 || loss >= 1 {
		return invalid(name+".loss", "--"+name+"-loss", fmt.Sprintf("must be in [0, 1), got %v", loss))
	}
	p.Loss = loss
	return nil
}

func resolveQueue(name string, d *Dir, f *File, p *link.Params) error {
	pk, by := d.QueuePackets, d.QueueBytes
	if pk == nil && by == nil {
		pk, by = f.QueuePackets, f.QueueBytes
	}
	if pk != nil && by != nil {
		return invalid(name+".queue_packets", "--queue-packets/--queue-bytes", "set only one of queue_packets and queue_bytes")
	}
	if pk != nil && (*pk <= 0 || *pk > 1_000_000) {
		return invalid(name+".queue_packets", "--"+name+"-queue-packets", fmt.Sprintf("must be in [1, 1000000], got %d", *pk))
	}
	if by != nil && (*by <= 0 || *by > 1<<30) {
		return invalid(name+".queue_bytes", "--"+name+"-queue-bytes", fmt.Sprintf("must be in [1, 2^30], got %d", *by))
	}
	p.QueuePackets = deref(pk, 0)
	p.QueueBytes = deref(by, 0)
	if pk == nil && by == nil {
		p.QueuePackets = DefaultQueuePackets
	}
	return nil
}

// IsInvalid reports whether err is a validation error.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }
