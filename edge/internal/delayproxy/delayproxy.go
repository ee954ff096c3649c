// Package delayproxy holds the test-side delay line shared by tailor-edge's
// round-trip tests: a byte-stream copy that delivers each chunk a fixed
// one-way delay after it was read, so durations through it count RTTs.
package delayproxy

import (
	"net"
	"sync"
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

// ServeTCP accepts on ln until it is closed and forwards each connection to
// target through two Pipes (oneWay each way); every goroutine it starts is
// tracked in wg, so a caller that closes ln and waits on wg leaves nothing.
func ServeTCP(ln net.Listener, target string, oneWay time.Duration, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			var pw sync.WaitGroup
			pw.Go(func() { Pipe(s, c, oneWay) })
			pw.Go(func() { Pipe(c, s, oneWay) })
			pw.Wait()
			_ = c.Close()
			_ = s.Close()
		})
	}
}
