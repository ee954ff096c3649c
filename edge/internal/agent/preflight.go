package agent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	btfPath    = "/sys/kernel/btf/vmlinux"
	ccListPath = "/proc/sys/net/ipv4/tcp_available_congestion_control"
)

// preflight returns the first missing prerequisite as a clear error.
func preflight(c *Config) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	var st unix.Statfs_t
	if err := unix.Statfs(c.CgroupRoot, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%w: %s is not a cgroup2 mount (mount one with `mount -t cgroup2 none %s`)", ErrNoCgroup2, c.CgroupRoot, c.CgroupRoot)
	}
	if _, err := os.Stat(btfPath); err != nil {
		return fmt.Errorf("%w: %v", ErrNoBTF, err)
	}
	return nil
}

// AvailableCC lists the congestion controls this kernel can set.
func AvailableCC() ([]string, error) {
	b, err := os.ReadFile(ccListPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	return strings.Fields(string(b)), nil
}

func checkCC(name string, available []string) error {
	if slices.Contains(available, name) {
		return nil
	}
	return fmt.Errorf("%w: %q (available: %s, from %s)", ErrCongestionControl, name, strings.Join(available, " "), ccListPath)
}

// KernelHZ reads CONFIG_HZ from /proc/config.gz, or measures it from the
// jiffies counter in /proc/timer_list.
func KernelHZ() (int, error) {
	if hz, err := hzFromConfig("/proc/config.gz"); err == nil {
		return hz, nil
	}
	return hzFromTimerList()
}

func hzFromConfig(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return 0, err
	}
	s := bufio.NewScanner(z)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CONFIG_HZ="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("%w: CONFIG_HZ not in %s", ErrAgent, path)
}

func hzFromTimerList() (int, error) {
	j0, t0, err := jiffies()
	if err != nil {
		return 0, err
	}
	time.Sleep(200 * time.Millisecond)
	j1, t1, err := jiffies()
	if err != nil {
		return 0, err
	}
	raw := float64(j1-j0) / t1.Sub(t0).Seconds()
	for _, hz := range []int{100, 250, 300, 1000} { // the kernel's choices
		if raw > float64(hz)*0.8 && raw < float64(hz)*1.2 {
			return hz, nil
		}
	}
	return 0, fmt.Errorf("%w: cannot determine HZ (measured %.0f)", ErrAgent, raw)
}

func jiffies() (int64, time.Time, error) {
	b, err := os.ReadFile("/proc/timer_list")
	now := time.Now()
	if err != nil {
		return 0, now, fmt.Errorf("%w: %v", ErrAgent, err)
	}
	i := bytes.Index(b, []byte("jiffies: "))
	if i < 0 {
		return 0, now, fmt.Errorf("%w: no jiffies in /proc/timer_list", ErrAgent)
	}
	line, _, _ := strings.Cut(string(b[i+9:]), "\n")
	j, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	return j, now, err
}

func isRoot() bool { return os.Geteuid() == 0 }
