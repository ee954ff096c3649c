// Package agent is tailor-agent: it loads the sock_ops program, attaches it
// to a cgroup, keeps the decision table in the BPF maps up to date (atomic
// generation swap) and ships one telemetry record per connection.
package agent

import "errors"

var (
	// ErrAgent prefixes agent errors that have no more specific sentinel.
	ErrAgent = errors.New("agent")
	// ErrNotRoot: loading BPF and attaching to cgroups needs root.
	ErrNotRoot = errors.New("agent: not root (needs CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON and cgroup write access)")
	// ErrNoCgroup2: the cgroup root is not a cgroup v2 mount.
	ErrNoCgroup2 = errors.New("agent: no cgroup v2")
	// ErrNoBTF: the kernel exposes no BTF (CO-RE and bpf_skc_to_tcp_sock need it).
	ErrNoBTF = errors.New("agent: no kernel BTF at /sys/kernel/btf/vmlinux")
	// ErrCongestionControl: a table names a congestion control this kernel lacks.
	ErrCongestionControl = errors.New("agent: congestion control not available")
	// ErrTableSource: the table file or URL could not be read.
	ErrTableSource = errors.New("agent: table source")
	// ErrNoTable: no valid table is installed yet.
	ErrNoTable = errors.New("agent: no valid decision table")
)

// UnsupportedError reports a feature this kernel or this layer cannot
// provide, so callers can fall back (e.g. to socket options in tailor-edge).
type UnsupportedError struct {
	Feature string // what is missing
	Err     error  // underlying cause, may be nil
}

func (e *UnsupportedError) Error() string {
	if e.Err != nil {
		return "agent: unsupported: " + e.Feature + ": " + e.Err.Error()
	}
	return "agent: unsupported: " + e.Feature
}

func (e *UnsupportedError) Unwrap() error { return e.Err }
