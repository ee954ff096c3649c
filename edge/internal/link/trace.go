package link

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ErrTrace prefixes every trace loading error.
var ErrTrace = errors.New("trace")

// maxTraceLines bounds the size of a trace file (10 M opportunities).
const maxTraceLines = 10_000_000

// Trace is a mahimahi link trace: each entry is a millisecond timestamp at
// which one OppBytes-byte delivery opportunity occurs. It loops with a
// period equal to its last timestamp.
type Trace struct {
	Name string  // source file name, for messages
	MS   []int64 // non-decreasing opportunity timestamps in ms; last > 0
}

// LoadTrace reads and validates a trace file.
func LoadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrace, err)
	}
	defer f.Close()
	return ParseTrace(path, f)
}

// ParseTrace parses trace text; errors carry name:line.
func ParseTrace(name string, r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	t := &Trace{Name: name}
	line := 0
	for sc.Scan() {
		line++
		if err := t.addLine(sc.Text(), line); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTrace, name, err)
	}
	return t, t.check()
}

func (t *Trace) addLine(text string, line int) error {
	s := strings.TrimSpace(text)
	if s == "" {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("%w: %s:%d: %q is not a non-negative integer", ErrTrace, t.Name, line, s)
	}
	if n := len(t.MS); n > 0 && v < t.MS[n-1] {
		return fmt.Errorf("%w: %s:%d: timestamp %d is less than previous %d", ErrTrace, t.Name, line, v, t.MS[n-1])
	}
	if len(t.MS) >= maxTraceLines {
		return fmt.Errorf("%w: %s:%d: more than %d entries", ErrTrace, t.Name, line, maxTraceLines)
	}
	t.MS = append(t.MS, v)
	return nil
}

func (t *Trace) check() error {
	if len(t.MS) == 0 {
		return fmt.Errorf("%w: %s: empty (no timestamps)", ErrTrace, t.Name)
	}
	if t.Period() == 0 {
		return fmt.Errorf("%w: %s: last timestamp is 0; a trace must last > 0 ms", ErrTrace, t.Name)
	}
	return nil
}

// Period is the loop length in ms (the last timestamp).
func (t *Trace) Period() int64 { return t.MS[len(t.MS)-1] }

// MeanMbit is the average capacity over one period.
func (t *Trace) MeanMbit() float64 {
	return float64(len(t.MS)) * OppBytes * 8 / float64(t.Period()) / 1e3
}

// CapacityPerSecond returns the bytes the trace can deliver in each whole
// second [i, i+1) s after the trace clock starts, for n seconds, looping.
func (t *Trace) CapacityPerSecond(n int) []int64 {
	out := make([]int64, n)
	for base := int64(0); base < int64(n)*1000; base += t.Period() {
		for _, ms := range t.MS {
			if s := (base + ms) / 1000; s < int64(n) {
				out[s] += OppBytes
			}
		}
	}
	return out
}
