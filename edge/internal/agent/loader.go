package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tailor-project/tailor/edge/internal/bpf"
	"github.com/tailor-project/tailor/edge/internal/knobs"
)

// linkPin is the pinned cgroup link's name inside Config.Pin.
const linkPin = "link"

// Agent is a loaded, attached sock_ops program and its table state.
type Agent struct {
	cfg       Config
	reg       *knobs.Registry
	objs      bpf.SockopsObjects
	inner     *ebpf.MapSpec // spec of one generation's LPM trie
	link      link.Link
	reader    *ringbuf.Reader
	cgroup    *cgroup
	hz        int
	available []string

	bus *Bus // --bus (bus.go); nil without

	mu          sync.Mutex
	gen         uint32             // active generation (0 or 1)
	history     map[int64][]string // recent tables' group ids by version, for telemetry (tables.go)
	order       []int64            // their versions, oldest installed first
	historySize int                // bytes of the remembered ids (as counted by idsSize)
	composed    int64              // --bus: the last composed table's version (bus.go)
	lastErr     error

	received        atomic.Int64 // events read from the ring buffer
	groupsForgotten atomic.Int64 // records whose table version is no longer remembered: no group named

	metrics          atomic.Pointer[agentMetrics] // nil without --metrics (metrics.go)
	tableLoads       atomic.Int64                 // tables installed by Refresh
	tableRejections  atomic.Int64                 // tables refused
	tableFetchErrors atomic.Int64                 // fetches that failed (not refusals)
	installedAt      atomic.Int64                 // unix ns of the last installation
	generatedAt      atomic.Uint64                // math.Float64bits of its generated_at
}

// Open checks prerequisites, loads the program (reusing pinned maps), and
// attaches it to the cgroup. The caller must Close it.
func Open(cfg Config) (*Agent, error) {
	cfg.defaults()
	if cfg.Pin != "" && cfg.Cgroup == "" {
		// a pinned link stays attached to the cgroup it was made for; without a
		// named one every run would create tailor-agent-<pid> and a restart
		// would tune a cgroup its server no longer runs in (found by review)
		return nil, fmt.Errorf("%w: --pin needs --cgroup (the cgroup the server runs in, the same at every restart)", ErrAgent)
	}
	if err := preflight(&cfg); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, history: map[int64][]string{}}
	if err := a.open(); err != nil {
		err = errors.Join(err, a.Close())
		if a.cgroup != nil && cfg.Pin != "" { // Close keeps a pinned run's cgroup; a failed run's it made goes
			err = errors.Join(err, a.cgroup.remove())
		}
		return nil, err
	}
	return a, nil
}

func (a *Agent) open() (err error) {
	if a.reg, err = knobs.Default(); err != nil {
		return err
	}
	if a.hz, err = KernelHZ(); err != nil {
		return err
	}
	if a.available, err = AvailableCC(); err != nil {
		return err
	}
	if err = a.load(); err != nil {
		return err
	}
	if a.cgroup, err = openCgroup(a.cfg.CgroupRoot, a.cfg.Cgroup); err != nil {
		return err
	}
	if err = a.attach(); err != nil {
		return err
	}
	if a.reader, err = ringbuf.NewReader(a.objs.Events); err != nil {
		return fmt.Errorf("%w: ring buffer: %v", ErrAgent, err)
	}
	return a.restoreGeneration()
}

func (a *Agent) load() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("%w: memlock: %v", ErrAgent, err)
	}
	spec, err := bpf.LoadSockops()
	if err != nil {
		return fmt.Errorf("%w: load spec: %v", ErrAgent, err)
	}
	if err := a.setVariables(spec); err != nil {
		return err
	}
	a.inner = spec.Maps["prefixes"].InnerMap.Copy()
	opts := &ebpf.CollectionOptions{}
	if a.cfg.Pin != "" {
		if err := mountBPFFS(a.cfg.Pin); err != nil {
			return err
		}
		for name, m := range spec.Maps {
			if name != "pending" && name != ".rodata" && name != ".bss" {
				m.Pinning = ebpf.PinByName
			}
		}
		opts.Maps.PinPath = a.cfg.Pin
	}
	if err := spec.LoadAndAssign(&a.objs, opts); err != nil {
		return loadError(err)
	}
	return nil
}

func (a *Agent) setVariables(spec *ebpf.CollectionSpec) error {
	vars := map[string]uint32{"telemetry_on": b2u(!a.cfg.NoTelemetry), "track_rate": b2u(!a.cfg.NoTrackRate),
		"wake_bytes": a.cfg.WakeBytes, "cost_hist": b2u(a.cfg.CostHist)}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("%w: set %s: %v", ErrAgent, name, err)
		}
	}
	return nil
}

func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return &UnsupportedError{Feature: "sock_ops program rejected by this kernel", Err: fmt.Errorf("%+v", ve)}
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return fmt.Errorf("%w: pinned maps from another agent version: run `tailor-agent cleanup --pin DIR`: %v", ErrAgent, err)
	}
	return fmt.Errorf("%w: load: %v", ErrAgent, err)
}

// attach reuses a pinned link (swapping in the new program) or creates one.
func (a *Agent) attach() error {
	pin := filepath.Join(a.cfg.Pin, linkPin)
	if a.cfg.Pin != "" {
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			a.link = l
			if err := a.sameCgroup(l); err != nil {
				return err
			}
			return l.Update(a.objs.TailorSockops)
		}
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: a.cgroup.path, Attach: ebpf.AttachCGroupSockOps, Program: a.objs.TailorSockops})
	if err != nil {
		return &UnsupportedError{Feature: "cgroup sock_ops attach at " + a.cgroup.path, Err: err}
	}
	a.link = l
	if a.cfg.Pin != "" {
		return l.Pin(pin)
	}
	return nil
}

// sameCgroup refuses a pinned link attached to another cgroup than the one
// this run names: swapping the program into it would tune connections of
// a cgroup the server is not in, and leave the named one untuned.
func (a *Agent) sameCgroup(l link.Link) error {
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("%w: pinned link: %v", ErrAgent, err)
	}
	cg := info.Cgroup()
	var st unix.Stat_t
	if cg == nil || unix.Stat(a.cgroup.path, &st) != nil || cg.CgroupId != st.Ino {
		return fmt.Errorf("%w: the pinned link in %s is attached to another cgroup than %s: run `tailor-agent cleanup --pin %s` first",
			ErrAgent, a.cfg.Pin, a.cgroup.path, a.cfg.Pin)
	}
	return nil
}

// Close detaches (unless pinned), frees the objects and removes a cgroup
// the agent created (unless pinned or still populated).
func (a *Agent) Close() error {
	var errs []error
	if a.reader != nil {
		errs = append(errs, a.reader.Close())
	}
	if a.link != nil {
		errs = append(errs, a.link.Close())
	}
	errs = append(errs, a.objs.Close())
	if a.cgroup != nil && a.cfg.Pin == "" {
		errs = append(errs, a.cgroup.remove())
	}
	return errors.Join(errs...)
}

// CgroupPath is the cgroup the program is attached to.
func (a *Agent) CgroupPath() string { return a.cgroup.path }

// HZ is the kernel tick rate used for the SYN-ACK RTO.
func (a *Agent) HZ() int { return a.hz }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
