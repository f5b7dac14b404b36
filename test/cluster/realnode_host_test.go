package cluster

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What a real-node instance leaves when its process dies (state directory, bridge, cgroups,
// processes naming the directory, processes in the cgroups) is removed by the next start;
// what a live instance holds is not touched.
func TestCleanStaleRealNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a bridge and cgroups")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	setup, err := flock(realNodeSetupLock, true)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()

	dead, live := fakeInstance(t, false), fakeInstance(t, true)
	cleaned, err := cleanStaleRealNodes()
	if err != nil {
		t.Fatalf("cleanStaleRealNodes: %v", err)
	}
	if !contains(cleaned, dead.dir) {
		t.Errorf("cleaned %v, want %s among them", cleaned, dead.dir)
	}
	for _, in := range []*fakeRealNodes{dead, live} {
		_, dirErr := os.Stat(in.dir)
		_, linkErr := net.InterfaceByName(in.bridge)
		_, cgErr := os.Stat(in.cgroup)
		switch {
		case in == dead && !(os.IsNotExist(dirErr) && linkErr != nil && os.IsNotExist(cgErr) && in.named.gone() && in.inCgroup.gone()):
			t.Errorf("dead instance %s left: dir %v, bridge %v, cgroup %v, process naming it gone %v, process in its cgroup gone %v",
				in.dir, dirErr, linkErr, cgErr, in.named.gone(), in.inCgroup.gone())
		case in == live && !(dirErr == nil && linkErr == nil && cgErr == nil && in.named.alive() && in.inCgroup.alive()):
			t.Errorf("live instance %s was touched: dir %v, bridge %v, cgroup %v, processes alive %v %v",
				in.dir, dirErr, linkErr, cgErr, in.named.alive(), in.inCgroup.alive())
		}
	}
}

type fakeRealNodes struct {
	dir, bridge, cgroup string
	named, inCgroup     *sleeper
}

// fakeInstance makes what a real-node instance leaves on the machine, its lock held (a live
// instance) or not (the process that owned it died), and removes it when the test ends.
func fakeInstance(t *testing.T, held bool) *fakeRealNodes {
	t.Helper()
	id := "t" + randomSuffix()[:5]
	in := &fakeRealNodes{dir: filepath.Join(os.TempDir(), realNodePrefix+id), bridge: realNodePrefix + id}
	if err := os.Mkdir(in.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := teardownInstance(in.dir, id); err != nil {
			t.Errorf("teardown of %s: %v", in.dir, err)
		}
	})
	if held {
		lock, err := flock(filepath.Join(in.dir, "lock"), false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lock.Close() })
	}
	if err := ip("link", "add", in.bridge, "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	cg := realNodePrefix + id + "-n0"
	if err := createCgroup(cg); err != nil {
		t.Fatal(err)
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		t.Fatal(err)
	}
	in.cgroup = filepath.Join(hs[0], cg)
	// A shim-like process (its command line names the state directory) and a pod-like one
	// (in the node's cgroup), both reparented as after their owner's death.
	in.named = startSleeper(t, "tail", "-F", filepath.Join(in.dir, "containerd.log"))
	in.inCgroup = startSleeper(t, "sleep", "600")
	if err := os.WriteFile(filepath.Join(in.cgroup, "cgroup.procs"), []byte(strconv.Itoa(in.inCgroup.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return in
}

// sleeper is a process the test started; done closes once it has exited and been reaped.
type sleeper struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startSleeper(t *testing.T, name string, args ...string) *sleeper {
	t.Helper()
	s := &sleeper{cmd: exec.Command(name, args...), done: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); <-s.done })
	return s
}

func (s *sleeper) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// gone waits a moment for a killed process to be reaped.
func (s *sleeper) gone() bool {
	select {
	case <-s.done:
		return true
	case <-time.After(2 * time.Second):
		return false
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The pod bridge keeps its MAC address while pods come and go: a veth with a lower MAC
// joins it, then leaves. (Linux otherwise gives a bridge its lowest port's MAC, and every
// pod's ARP entry for the host's addresses on it goes stale: the agent's pods were cut off
// from the host for 40 s and restarted by their liveness probes.)
func TestPodBridgeKeepsItsMAC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a bridge")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	// A subnet as an instance picks one, under the same lock: no live instance's.
	setup, err := flock(realNodeSetupLock, true)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	subnet, err := choosePodSubnet()
	if err != nil {
		t.Fatal(err)
	}
	id := "t" + randomSuffix()[:5]
	p := &podNetwork{bridge: realNodePrefix + id, subnet: subnet}
	if err := p.create(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteLink(p.bridge); err != nil {
			t.Error(err)
		}
	})
	mac := func() string {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", p.bridge, "address"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	before := mac()
	veth, peer := "fl-tv"+id, "fl-tp"+id
	if err := ip("link", "add", veth, "address", "02:00:00:00:00:01", "type", "veth", "peer", "name", peer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteLink(veth) })
	if err := ip("link", "set", veth, "master", p.bridge); err != nil {
		t.Fatal(err)
	}
	if got := mac(); got != before {
		t.Errorf("a port with a lower MAC joined: the bridge's MAC went from %s to %s", before, got)
	}
	if err := deleteLink(veth); err != nil {
		t.Fatal(err)
	}
	if got := mac(); got != before {
		t.Errorf("the port left: the bridge's MAC went from %s to %s", before, got)
	}
}
