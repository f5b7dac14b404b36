package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What real nodes change on the machine, and how a teardown (or the next run, after a test
// process that died) finds it again: everything carries the prefix realNodePrefix and the
// instance's id.
//
//   - a state directory os.TempDir()/fl-rn-<id>/ holding the nodes' files and a lock that
//     the owning process holds while it lives (flock: the kernel drops it when it dies);
//   - a bridge fl-rn-<id> with the host's addresses on it;
//   - a cgroup fl-rn-<id>-n<i> at the root of every cgroup hierarchy, one per node;
//   - processes: the kubelets, containerds and their shims, CoreDNS and the device plugins,
//     all of which name the state directory on their command line, and the pods' processes,
//     which live in the nodes' cgroups.
//
// Mounts are none of the host's: each node's kubelet, containerd and shims run in a mount
// namespace of the node's own (see realnode.go), which goes away with its last process.
const realNodePrefix = "fl-rn-"

// realNodeSetupLock serialises real-node setups and stale cleanups on this machine, so that
// a cleanup never takes a starting instance (not yet locked) for a dead one.
var realNodeSetupLock = filepath.Join(os.TempDir(), realNodePrefix+"setup.lock")

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers, v1 named
// hierarchies and the v2 unified one), as directories under /sys/fs/cgroup.
func cgroupHierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
		f := strings.Fields(sc.Text())
		sep := -1
		for i, s := range f {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) || len(f) < 5 {
			continue
		}
		if fs := f[sep+1]; (fs == "cgroup" || fs == "cgroup2") && f[3] == "/" {
			out = append(out, f[4])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted (cgroupfs)")
	}
	return out, nil
}

// createCgroup creates the cgroup name at the root of every hierarchy. A new cpuset cgroup
// of cgroup v1 has no CPUs and no memory nodes, and no process may join it until they are
// set: copy its parent's.
func createCgroup(name string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("set %s/%s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// removeCgroups kills every process in the cgroups at the root of every hierarchy whose
// name has the prefix, and removes them, innermost first.
func removeCgroups(prefix string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var roots []string
	for _, h := range hs {
		matches, _ := filepath.Glob(filepath.Join(h, prefix+"*"))
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				roots = append(roots, m)
			}
		}
	}
	if len(roots) == 0 {
		return nil
	}
	// A process killed in one hierarchy leaves every other one at once, but its exit takes
	// a moment: retry the removal until the cgroups are empty.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var errs []error
		for _, r := range roots {
			killCgroupTree(r)
		}
		for _, r := range roots {
			if err := removeTree(r); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroups %s*: %w", prefix, errors.Join(errs...))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killCgroupTree sends SIGKILL to every process of a cgroup and its descendants.
func killCgroupTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// removeTree removes a cgroup directory and its descendants (cgroupfs directories go with
// rmdir only, innermost first).
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

// killProcessesNaming sends SIGKILL to every process whose command line names dir (the
// state directory of one real-node instance) and waits until they are gone. Shims outlive
// the containerd that started them (they are reparented), so a teardown finds them this way.
func killProcessesNaming(dir string) error {
	self := os.Getpid()
	find := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			for _, arg := range bytes.Split(cmdline, []byte{0}) {
				if a := string(arg); a == dir || strings.HasPrefix(a, dir+"/") || strings.Contains(a, "="+dir+"/") {
					pids = append(pids, pid)
					break
				}
			}
		}
		return pids
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := find()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of %s still alive after SIGKILL: %v", dir, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ip runs ip(8) with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// deleteLink deletes a network interface if it exists.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // gone already
	}
	return ip("link", "del", name)
}

// flock takes an exclusive lock on path (creating it), waiting for it when wait is set.
// Closing the returned file releases the lock; so does the process's death.
func flock(path string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// cleanStaleRealNodes removes what real-node instances left behind when the process that
// owned them died (a test binary killed by its timeout, a panic): an instance whose lock
// nobody holds is dead. The caller holds realNodeSetupLock. It returns what it removed.
func cleanStaleRealNodes() ([]string, error) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), realNodePrefix+"*"))
	var cleaned []string
	var errs []error
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		lock, err := flock(filepath.Join(dir, "lock"), false)
		if err != nil {
			continue // alive: its owner holds the lock
		}
		id := strings.TrimPrefix(filepath.Base(dir), realNodePrefix)
		err = teardownInstance(dir, id)
		lock.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cleaned = append(cleaned, dir)
	}
	// A bridge or cgroups whose state directory is already gone (a teardown that died half
	// way) are stale too: no live instance lacks its directory.
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		if id, ok := strings.CutPrefix(i.Name, realNodePrefix); ok {
			if _, err := os.Stat(filepath.Join(os.TempDir(), realNodePrefix+id)); errors.Is(err, os.ErrNotExist) {
				if err := teardownInstance("", id); err != nil {
					errs = append(errs, err)
				}
				cleaned = append(cleaned, i.Name)
			}
		}
	}
	return cleaned, errors.Join(errs...)
}

// teardownInstance removes everything of the instance id whose state directory is dir
// ("" when it is gone): its processes, its pods' cgroups, its bridge, then the directory.
func teardownInstance(dir, id string) error {
	var errs []error
	if dir != "" {
		errs = append(errs, killProcessesNaming(dir))
	}
	errs = append(errs, removeCgroups(realNodePrefix+id+"-"), deleteLink(realNodePrefix+id))
	if dir != "" {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// leftovers lists what of instance id (state directory dir) is still on the machine: the
// directory, the bridge, cgroups, processes naming the directory.
func leftovers(dir, id string) []string {
	var out []string
	if _, err := os.Stat(dir); err == nil {
		out = append(out, "directory "+dir)
	}
	if _, err := net.InterfaceByName(realNodePrefix + id); err == nil {
		out = append(out, "bridge "+realNodePrefix+id)
	}
	if hs, err := cgroupHierarchies(); err == nil {
		for _, h := range hs {
			m, _ := filepath.Glob(filepath.Join(h, realNodePrefix+id+"-*"))
			for _, cg := range m {
				out = append(out, "cgroup "+cg)
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			out = append(out, "process "+e.Name()+": "+strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " "))
		}
	}
	return out
}
