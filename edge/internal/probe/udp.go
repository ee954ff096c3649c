package probe

import (
	"encoding/binary"
	"errors"
	"flag"
	"net"
	"os"
	"time"
)

// udpEcho echoes datagrams on :port until -dur elapses.
func udpEcho(fs *flag.FlagSet, args []string) (any, error) {
	port := fs.Int("port", 9000, "UDP port")
	dur := fs.Duration("dur", 30*time.Second, "run time")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{Port: *port})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetDeadline(time.Now().Add(*dur))
	buf := make([]byte, 2048)
	n := 0
	for ; ; n++ {
		k, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return map[string]int{"echoed": n}, timeoutOK(err)
		}
		_, _ = c.WriteToUDP(buf[:k], from)
	}
}

func timeoutOK(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// udpPing sends -n sequential probes, each waiting up to -timeout.
func udpPing(fs *flag.FlagSet, args []string) (any, error) {
	addr := fs.String("addr", "", "host:port of a udp-echo")
	n := fs.Int("n", 20, "probes")
	gap := fs.Duration("interval", 50*time.Millisecond, "pause between probes")
	timeout := fs.Duration("timeout", 2*time.Second, "per-probe timeout")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c, err := net.Dial("udp", *addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var rtts []float64
	for i := 0; i < *n; i++ {
		if ms, ok := pingOnce(c, uint64(i), *timeout); ok {
			rtts = append(rtts, ms)
		}
		time.Sleep(*gap)
	}
	return map[string]any{"sent": *n, "recv": len(rtts), "rtt_ms": summarize(rtts)}, nil
}

func pingOnce(c net.Conn, seq uint64, timeout time.Duration) (float64, bool) {
	var b [64]byte
	binary.BigEndian.PutUint64(b[:], seq)
	start := time.Now()
	if _, err := c.Write(b[:]); err != nil {
		return 0, false
	}
	deadline := start.Add(timeout)
	_ = c.SetReadDeadline(deadline)
	var r [2048]byte
	for time.Now().Before(deadline) {
		k, err := c.Read(r[:])
		if err != nil {
			return 0, false
		}
		if k >= 8 && binary.BigEndian.Uint64(r[:]) == seq {
			return msSince(start), true
		}
	}
	return 0, false
}

// udpFlood sends -n datagrams at -pps and counts the echoes.
func udpFlood(fs *flag.FlagSet, args []string) (any, error) {
	addr := fs.String("addr", "", "host:port of a udp-echo")
	n := fs.Int("n", 50000, "datagrams")
	pps := fs.Int("pps", 10000, "send rate")
	size := fs.Int("size", 100, "datagram size")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c, err := net.Dial("udp", *addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.(*net.UDPConn).SetReadBuffer(4 << 20)
	got := make(chan int, 1)
	go func() { got <- countEchoes(c, *n) }()
	sendPaced(c, *n, *pps, *size)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	recv := <-got
	return map[string]any{"sent": *n, "recv": recv, "loss": 1 - float64(recv)/float64(*n)}, nil
}

// sendPaced sends n datagrams in 1 ms bursts of pps/1000.
func sendPaced(c net.Conn, n, pps, size int) {
	b := make([]byte, max(size, 8))
	per := max(pps/1000, 1)
	start := time.Now()
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(b, uint64(i))
		_, _ = c.Write(b)
		if (i+1)%per == 0 {
			due := start.Add(time.Duration((i+1)/per) * time.Millisecond)
			time.Sleep(time.Until(due))
		}
	}
}

func countEchoes(c net.Conn, n int) int {
	seen := make([]bool, n)
	recv := 0
	var r [2048]byte
	for recv < n {
		k, err := c.Read(r[:])
		if err != nil {
			return recv
		}
		if seq := binary.BigEndian.Uint64(r[:]); k >= 8 && seq < uint64(n) && !seen[seq] {
			seen[seq] = true
			recv++
		}
	}
	return recv
}
