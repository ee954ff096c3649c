// Package delayproxy holds the test-side delay line shared by tailor-edge's
// round-trip tests: a byte-stream copy that delivers each chunk a fixed
// one-way delay after it was read, so durations through it count RTTs.
package delayproxy

import (
	"net"
	"time"
)

type chunk struct {
	b  []byte
	at time.Time
}

// Pipe copies src to dst, delivering each chunk oneWay after it was read, in
// order (at most 4096 chunks in flight); at EOF it closes dst's write side
// when dst is TCP.
func Pipe(dst, src net.Conn, oneWay time.Duration) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(oneWay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for d := range q {
		time.Sleep(time.Until(d.at))
		if _, err := dst.Write(d.b); err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
