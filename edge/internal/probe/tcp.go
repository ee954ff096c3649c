package probe

import (
	"encoding/binary"
	"flag"
	"io"
	"net"
	"time"
)

// tcpServe accepts connections until -dur; each sends a 16-byte request
// (bytes wanted, duration ns; 0 = no limit) and gets that much data.
func tcpServe(fs *flag.FlagSet, args []string) (any, error) {
	port := fs.Int("port", 9001, "TCP port")
	dur := fs.Duration("dur", 30*time.Second, "run time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{Port: *port})
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	end := time.Now().Add(*dur)
	_ = ln.SetDeadline(end)
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil, timeoutOK(err)
		}
		go serveConn(c, end)
	}
}

func serveConn(c net.Conn, end time.Time) {
	defer c.Close()
	_ = c.SetDeadline(end)
	var req [16]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	want := binary.BigEndian.Uint64(req[:])
	stop := time.Now().Add(time.Duration(binary.BigEndian.Uint64(req[8:])))
	timed := binary.BigEndian.Uint64(req[8:]) > 0
	buf := make([]byte, 64<<10)
	for sent := uint64(0); sent < want || (want == 0 && timed); {
		if timed && time.Now().After(stop) {
			return
		}
		k := uint64(len(buf))
		if want > 0 {
			k = min(k, want-sent)
		}
		n, err := c.Write(buf[:k])
		if err != nil {
			return
		}
		sent += uint64(n)
	}
}

// GetResult is the output of tcp-get.
type GetResult struct {
	ConnectMS   float64 `json:"connect_ms"`
	FirstByteMS float64 `json:"first_byte_ms"` // from request sent
	Bytes       int64   `json:"bytes"`
	ElapsedS    float64 `json:"elapsed_s"` // request sent → last byte
	MarkToEndS  float64 `json:"mark_to_end_s"`
	BinMS       int     `json:"bin_ms"`
	Bins        []int64 `json:"bins"` // bytes received per bin from request sent
}

// tcpGet downloads -bytes (or for -dur) and times it.
func tcpGet(fs *flag.FlagSet, args []string) (any, error) {
	addr := fs.String("addr", "", "host:port of a tcp-serve")
	want := fs.Int64("bytes", 0, "bytes to fetch (0 = use -dur)")
	dur := fs.Duration("dur", 0, "server sends for this long")
	mark := fs.Int64("mark", 0, "also time the bytes after this offset")
	bin := fs.Duration("bin", 100*time.Millisecond, "histogram bin")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	t0 := time.Now()
	c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := &GetResult{ConnectMS: msSince(t0), BinMS: int(bin.Milliseconds())}
	var req [16]byte
	binary.BigEndian.PutUint64(req[:], uint64(*want))
	binary.BigEndian.PutUint64(req[8:], uint64(*dur))
	_ = c.SetDeadline(time.Now().Add(*dur + 60*time.Second))
	return r, r.receive(c, req[:], *mark, *bin)
}

func (r *GetResult) receive(c net.Conn, req []byte, mark int64, bin time.Duration) error {
	start := time.Now()
	if _, err := c.Write(req); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	var markAt time.Time
	for {
		n, err := c.Read(buf)
		now := time.Now()
		if n > 0 {
			r.add(now.Sub(start), int64(n), bin)
			if r.Bytes > mark && markAt.IsZero() && mark > 0 {
				markAt = now
			}
			r.ElapsedS = now.Sub(start).Seconds()
		}
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if !markAt.IsZero() {
		r.MarkToEndS = r.ElapsedS - markAt.Sub(start).Seconds()
	}
	return nil
}

func (r *GetResult) add(at time.Duration, n int64, bin time.Duration) {
	if r.Bytes == 0 {
		r.FirstByteMS = float64(at.Nanoseconds()) / 1e6
	}
	r.Bytes += n
	i := int(at / bin)
	for len(r.Bins) <= i && len(r.Bins) < 100_000 {
		r.Bins = append(r.Bins, 0)
	}
	if i < len(r.Bins) {
		r.Bins[i] += n
	}
}

// tcpConnect times -n TCP handshakes (like curl's time_connect).
func tcpConnect(fs *flag.FlagSet, args []string) (any, error) {
	addr := fs.String("addr", "", "host:port of a tcp-serve")
	n := fs.Int("n", 10, "connections")
	gap := fs.Duration("interval", 50*time.Millisecond, "pause between connections")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var ms []float64
	for i := 0; i < *n; i++ {
		t0 := time.Now()
		c, err := net.DialTimeout("tcp", *addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		ms = append(ms, msSince(t0))
		_, _ = c.Write(make([]byte, 16))
		c.Close()
		time.Sleep(*gap)
	}
	return map[string]any{"connect_ms": summarize(ms)}, nil
}
