// Package netns is the namespace harness: it creates a server and a client
// network namespace, wires them through the emulated link, runs one
// command in each, and always tears everything down.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrNetns prefixes harness errors.
var ErrNetns = errors.New("netns")

// Prefix starts every namespace name this package creates.
const Prefix = "tl-"

// ipTimeout bounds every `ip` invocation.
const ipTimeout = 10 * time.Second

var seq atomic.Int64

// Names returns a fresh, unique (server, client) namespace pair:
// tl-<pid>-<n>-s and tl-<pid>-<n>-c.
func Names() (srv, cli string) {
	base := fmt.Sprintf("%s%d-%d", Prefix, os.Getpid(), seq.Add(1))
	return base + "-s", base + "-c"
}

// ip runs `ip args...` with a bounded run time.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: ip %s: %v: %s", ErrNetns, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Add creates namespace name with loopback up and IPv6 off (so no
// router solicitations or MLD reports cross the link).
func Add(name string) error {
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	if err := ip("-n", name, "link", "set", "lo", "up"); err != nil {
		return errors.Join(err, Del(name))
	}
	for _, k := range []string{"all", "default"} {
		key := "net.ipv6.conf." + k + ".disable_ipv6=1"
		if err := ip("netns", "exec", name, "sysctl", "-qw", key); err != nil {
			return errors.Join(err, Del(name))
		}
	}
	return nil
}

// Del kills every process left in namespace name, then deletes it.
func Del(name string) error {
	killAll(name)
	return ip("netns", "del", name)
}

// killAll SIGKILLs the processes inside namespace name (all of them were
// started by this harness), bounded to a few rounds.
func killAll(name string) {
	for round := 0; round < 5; round++ {
		pids := Pids(name)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pids lists the processes in namespace name.
func Pids(name string) []int {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// List returns the namespaces whose names start with prefix.
func List(prefix string) []string {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Sweep deletes tl-<pid>-* namespaces whose creating process is gone
// (left behind by a SIGKILLed harness). It returns the names deleted.
func Sweep() ([]string, error) {
	var done []string
	var errs []error
	for _, name := range List(Prefix) {
		f := strings.SplitN(strings.TrimPrefix(name, Prefix), "-", 2)
		pid, err := strconv.Atoi(f[0])
		if err != nil || syscall.Kill(pid, 0) == nil || pid == os.Getpid() {
			continue
		}
		if err := Del(name); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, name)
	}
	return done, errors.Join(errs...)
}
