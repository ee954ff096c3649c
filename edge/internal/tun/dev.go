// Package tun runs the emulated link: two TUN devices, one in each
// namespace, served by a single locked OS thread with epoll and a timerfd.
package tun

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrTUN prefixes device setup errors.
var ErrTUN = errors.New("tun")

// nsPath maps a namespace name to its bind-mount path (paths pass through).
func nsPath(ns string) string {
	if strings.Contains(ns, "/") {
		return ns
	}
	return "/run/netns/" + ns
}

// openIn creates TUN device name inside namespace ns. It must run on a
// locked OS thread; the thread's namespace is restored before returning.
func openIn(ns, name string) (int, error) {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: own namespace: %v", ErrTUN, err)
	}
	defer unix.Close(orig)
	if err := enter(nsPath(ns)); err != nil {
		return -1, err
	}
	fd, openErr := openTUN(name)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// The caller never unlocks its thread, so the runtime will
		// discard this thread when the goroutine exits.
		closeFD(fd)
		return -1, fmt.Errorf("%w: cannot return to own namespace: %v", ErrTUN, err)
	}
	return fd, openErr
}

func enter(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: namespace %s: %v", ErrTUN, path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%w: setns %s: %v", ErrTUN, path, err)
	}
	return nil
}

// openTUN opens a non-blocking IFF_TUN|IFF_NO_PI device in the current
// namespace. It disappears when the fd is closed.
func openTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: open /dev/net/tun: %v", ErrTUN, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: TUNSETIFF %s: %v", ErrTUN, name, err)
	}
	return fd, nil
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
