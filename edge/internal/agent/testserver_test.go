package agent_test

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// serverEnv makes the test binary act as the Go test server (started by the
// integration test inside the agent's cgroup and the server namespace).
const serverEnv = "TAILOR_AGENT_TEST_SERVER"

// sockReport is what the test server sees on one connection.
type sockReport struct {
	Phase      string `json:"phase"` // accept | close
	Remote     string `json:"remote"`
	CC         string `json:"cc"`
	Cwnd       uint32 `json:"cwnd"`
	SndBuf     int    `json:"sndbuf"`
	RcvBuf     int    `json:"rcvbuf"`
	Ssthresh   uint32 `json:"ssthresh"`
	BytesAcked uint64 `json:"bytes_acked"`
	MSS        uint32 `json:"mss"`
	Retrans    uint32 `json:"retrans"`
}

// serveTest accepts connections on addr, reports socket state at accept
// and before close, and sends 64 KiB to each client.
func serveTest(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(3)
	}
	out := json.NewEncoder(os.Stdout)
	reports := make(chan sockReport, 64)
	go func() {
		for r := range reports {
			_ = out.Encode(r)
		}
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c.(*net.TCPConn), reports)
	}
}

func handle(c *net.TCPConn, reports chan<- sockReport) {
	defer c.Close()
	reports <- report(c, "accept")
	_, _ = c.Write(make([]byte, 64<<10))
	_ = c.CloseWrite()
	_, _ = io.Copy(io.Discard, c)
	reports <- report(c, "close")
}

func report(c *net.TCPConn, phase string) sockReport {
	r := sockReport{Phase: phase, Remote: c.RemoteAddr().(*net.TCPAddr).IP.String()}
	raw, _ := c.SyscallConn()
	_ = raw.Control(func(fd uintptr) {
		r.CC, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		r.SndBuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, syscall.SO_SNDBUF)
		r.RcvBuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, syscall.SO_RCVBUF)
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			r.Cwnd, r.BytesAcked, r.MSS, r.Retrans = ti.Snd_cwnd, ti.Bytes_acked, ti.Snd_mss, ti.Total_retrans
			r.Ssthresh = ti.Snd_ssthresh
		}
	})
	return r
}
