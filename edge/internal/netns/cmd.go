package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runCommands starts the server, waits until it is ready, runs the client
// to completion (or ctx end) and stops the server.
func runCommands(ctx context.Context, s *Spec, srv, cli string) (int, error) {
	var server *exec.Cmd
	if s.ServerCmd != "" {
		server = command(ctx, srv, s.ServerCmd, s)
		server.Stdout = s.ServerOut
		if err := server.Start(); err != nil {
			return -1, fmt.Errorf("%w: server: %v", ErrNetns, err)
		}
		defer stopServer(server)
	}
	if err := waitReady(ctx, s, srv); err != nil {
		return -1, err
	}
	client := command(ctx, cli, s.ClientCmd, s)
	client.Stdout = s.Stdout
	err := client.Run()
	if ctx.Err() != nil {
		return -1, stopped(ctx, "client did not finish")
	}
	return exitCode(client, err)
}

// stopped classifies why ctx ended: the run's deadline or the caller.
func stopped(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s", ErrTimeout, what)
	}
	return fmt.Errorf("%w: %s: %v", ErrInterrupted, what, context.Cause(ctx))
}

// command builds `ip netns exec ns sh -c line` in its own process group;
// cancelling ctx SIGKILLs the whole group.
func command(ctx context.Context, ns, line string, s *Spec) *exec.Cmd {
	c := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sh", "-c", line)
	c.Env = append(os.Environ(), "TL_SERVER_IP="+s.Link.SrvIP.String(),
		"TL_CLIENT_IP="+s.Link.CliIP.String(), "TL_SERVER_NS="+s.Link.SrvNS, "TL_CLIENT_NS="+s.Link.CliNS)
	c.Stderr = s.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = 2 * time.Second
	return c
}

// stopServer sends SIGTERM to the server's group, then SIGKILL after 1 s.
func stopServer(c *exec.Cmd) {
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func exitCode(c *exec.Cmd, err error) (int, error) {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1, fmt.Errorf("%w: client: %v", ErrNetns, err)
	}
	st, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	if ok && st.Signaled() {
		return 128 + int(st.Signal()), nil
	}
	return c.ProcessState.ExitCode(), nil
}

func waitReady(ctx context.Context, s *Spec, srv string) error {
	if s.WaitPort <= 0 {
		select {
		case <-time.After(s.ReadyDelay):
			return nil
		case <-ctx.Done():
			return stopped(ctx, "waiting for server")
		}
	}
	addr := net.JoinHostPort(s.Link.SrvIP.String(), strconv.Itoa(s.WaitPort))
	return inNS(srv, func() error { return dialLoop(ctx, addr) })
}

// dialLoop connects to addr every 20 ms until it succeeds or ctx ends.
func dialLoop(ctx context.Context, addr string) error {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return stopped(ctx, fmt.Sprintf("server never listened on %s (%v)", addr, err))
		}
	}
}

// inNS runs fn on a locked thread inside namespace ns; sockets fn creates
// belong to ns. The thread is only released if its namespace was restored.
func inNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("%w: %v", ErrNetns, err)
			return
		}
		defer unix.Close(orig)
		errc <- enterAndRun(ns, fn)
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-errc
}

func enterAndRun(ns string, fn func() error) error {
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNetns, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%w: setns %s: %v", ErrNetns, ns, err)
	}
	return fn()
}
