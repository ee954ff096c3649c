package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is the cgroup v2 directory the program is attached to.
type cgroup struct {
	path    string
	created bool // the agent made it, so it removes it
}

func openCgroup(root, name string) (*cgroup, error) {
	if name == "" {
		name = fmt.Sprintf("tailor-agent-%d", os.Getpid())
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, name)
	}
	if !strings.HasPrefix(filepath.Clean(path)+"/", filepath.Clean(root)+"/") {
		return nil, fmt.Errorf("%w: cgroup %s is not under %s", ErrNoCgroup2, path, root)
	}
	if _, err := os.Stat(path); err == nil {
		return &cgroup{path: path}, nil
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("%w: create cgroup: %v", ErrAgent, err)
	}
	return &cgroup{path: path, created: true}, nil
}

// remove deletes the cgroup if the agent created it, waiting briefly for
// exiting processes to leave.
func (c *cgroup) remove() error {
	if !c.created {
		return nil
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(c.path); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%w: remove cgroup %s: %v", ErrAgent, c.path, err)
}

// Command returns a command that starts inside the agent's cgroup
// (CLONE_INTO_CGROUP), so a later `ip netns exec` in it cannot escape.
func (a *Agent) Command(argv ...string) (*exec.Cmd, func(), error) {
	fd, err := unix.Open(a.cgroup.path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open cgroup: %v", ErrAgent, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Setpgid: true}
	return cmd, func() { unix.Close(fd) }, nil
}

// mountBPFFS mounts a private bpffs at dir unless one is there already.
func mountBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: pin dir: %v", ErrAgent, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("%w: mount bpffs at %s: %v", ErrAgent, dir, err)
	}
	return nil
}

// Cleanup removes what a pinned agent leaves behind: the pinned link (which
// detaches the program), the pinned maps, the bpffs mount and its directory,
// and the cgroup when given and empty.
func Cleanup(pin, cgroupPath string) error {
	var errs []error
	var st unix.Statfs_t
	if pin != "" && unix.Statfs(pin, &st) == nil && st.Type == unix.BPF_FS_MAGIC {
		ents, _ := os.ReadDir(pin)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".debug") {
				continue // maps.debug, progs.debug: the kernel's own bpffs entries
			}
			errs = append(errs, os.Remove(filepath.Join(pin, e.Name())))
		}
		errs = append(errs, unix.Unmount(pin, 0))
		errs = append(errs, os.Remove(pin))
	}
	if cgroupPath != "" {
		if err := os.Remove(cgroupPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%w: remove cgroup: %v", ErrAgent, err))
		}
	}
	return errors.Join(errs...)
}
