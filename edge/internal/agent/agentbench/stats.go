package agentbench

import (
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// enableStats turns on BPF run-time statistics until the returned func runs.
func enableStats() (func(), error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return func() {}, err
	}
	return func() { c.Close() }, nil
}
