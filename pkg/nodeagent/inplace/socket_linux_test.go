package inplace

import (
	"cmp"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// fakeProc is a /proc with one process, pid, in the cgroup named cgroup, whose root holds a
// barrier's run directory behind an image's /var/run -> /run link; the barrier waits there.
// It returns the proc root and the barrier's outcome.
func fakeProc(t *testing.T, pid, cgroup string, startAttempt int) (string, <-chan int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc") // short: a socket's path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, pid, "root")
	run := filepath.Join(root, "run", "faultline")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	// Absolute: followed as it stood, it would lead to the test machine's own /run.
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root, "var", "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pid, "cgroup"), []byte("0::/kubepods/besteffort/poduid-1/"+cgroup+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(pid+" (faultline-barr) S 1 1 1 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := barrier.Config{AttemptFile: filepath.Join(run, "attempt"), Socket: filepath.Join(run, filepath.Base(barrier.DefaultSocket)),
		TerminationLog: filepath.Join(dir, "termination-log")}
	if startAttempt > 0 {
		if err := barrier.WriteAttempt(cfg.AttemptFile, startAttempt); err != nil {
			t.Fatal(err)
		}
	}
	listening := make(chan struct{})
	cfg.Listening = func() { close(listening) }
	ctx, cancel := context.WithCancel(context.Background())
	out, done := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(done)
		n, _ := barrier.Wait(ctx, cfg)
		out <- n
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the barrier does not listen")
	}
	return dir, out
}

// TestOpenBarrierThroughItsSocket: the agent gives the go signal through the barrier's socket,
// found through the process the runtime names for the container, with no exec; it execs
// when that process is not the container's (the agent outside the node's PID namespace)
// or the runtime names none; a stale attempt is refused on the socket as on an exec.
func TestOpenBarrierThroughItsSocket(t *testing.T) {
	pod := makePod().barrier(running).obj()
	for name, tc := range map[string]struct {
		cgroup       string // the cgroup the process is in
		noPID        bool
		ended        bool // the runtime's status says the barrier exited, its list still not
		pid          int  // the PID the runtime names (default 4242, the fake /proc's)
		socketWorked bool // an earlier go signal went through a socket
		startAttempt int
		opened       bool
		via          string
		wantErr      error
		execs        int
	}{
		"through the socket":                          {cgroup: "bar", opened: true, via: ViaSocket},
		"the process is another container's: an exec": {cgroup: "other", opened: true, via: ViaExec, execs: 1},
		"the runtime names no process: an exec":       {cgroup: "bar", noPID: true, opened: true, via: ViaExec, execs: 1},
		"stale on the socket":                         {cgroup: "bar", startAttempt: 2, wantErr: ErrStale},
		// The barrier's process has ended (opened a moment ago); the runtime still lists it.
		"its process gone, sockets reached before: not waiting": {cgroup: "bar", pid: 4343, socketWorked: true, via: ""},
		"its process gone, no socket reached yet: an exec":      {cgroup: "bar", pid: 4343, opened: true, via: ViaExec, execs: 1},
		// Ended between the list and the status, which names no process: not opened again,
		// by exec or otherwise (TestRealInstalledAsAnOperatorWould saw an exec count as a
		// second open of a barrier the socket had opened).
		"ended, the runtime names no process: nothing": {cgroup: "bar", noPID: true, ended: true, via: ""},
	} {
		t.Run(name, func(t *testing.T) {
			proc, waited := fakeProc(t, "4242", tc.cgroup, tc.startAttempt)
			rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
			if !tc.noPID {
				rt.PIDs = map[string]int{"bar": cmp.Or(tc.pid, 4242)}
			}
			rt.StatusExited = map[string]bool{"bar": tc.ended}
			r := New(rt, nil)
			r.ProcRoot = proc
			r.socketWorks.Store(tc.socketWorked)
			ctx, via := withNotes(context.Background())
			opened, err := r.OpenBarrier(ctx, pod, 2)
			if opened != tc.opened || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("OpenBarrier = %v, %v; want %v, %v", opened, err, tc.opened, tc.wantErr)
			}
			if via.via != tc.via || len(rt.Execs) != tc.execs {
				t.Errorf("via %q with %d execs, want %q with %d", via.via, len(rt.Execs), tc.via, tc.execs)
			}
			// An exec says why the socket was out of reach.
			if (via.via == ViaExec) != strings.Contains(via.reason, "out of reach") {
				t.Errorf("via %q, reason %q: want a reason for an exec, none otherwise", via.via, via.reason)
			}
			if tc.via == ViaSocket {
				select {
				case n := <-waited:
					if n != 2 {
						t.Errorf("the barrier opened for attempt %d, want 2", n)
					}
				case <-time.After(10 * time.Second):
					t.Error("the barrier did not open")
				}
			}
		})
	}
}

// TestOpenBySocketHasADeadline: a socket that takes the connection and never answers (a
// barrier stopped, or anything else listening there) ends the open within the restarter's
// timeout, with an error the loop retries, never a wait without end.
func TestOpenBySocketHasADeadline(t *testing.T) {
	dir, runDir := procOfBar(t)
	ln, err := net.Listen("unix", filepath.Join(runDir, filepath.Base(barrier.DefaultSocket)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // never accepts: the connection waits in its backlog
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}, PIDs: map[string]int{"bar": 4242}}
	r := New(rt, nil)
	r.ProcRoot, r.ExecTimeout = dir, 200*time.Millisecond
	start := time.Now()
	opened, err := r.OpenBarrier(context.Background(), makePod().barrier(running).obj(), 2)
	if took := time.Since(start); opened || err == nil || took > 5*time.Second {
		t.Fatalf("OpenBarrier = %v, %v after %s; want an error within the timeout", opened, err, took)
	}
	if len(rt.Execs) != 0 {
		t.Errorf("%d execs: the go signal may have reached the barrier, nothing else is to be tried first", len(rt.Execs))
	}
}

// TestOpenBySocketWaitsForTheBarrierToListen: the runtime says the barrier runs before its
// program listens; the open through the socket looks again while the process lives, and
// opens it once it listens (TestRealAgentRestartsAPodInPlace opens a barrier that started a
// millisecond before).
func TestOpenBySocketWaitsForTheBarrierToListen(t *testing.T) {
	dir, runDir := procOfBar(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	time.AfterFunc(100*time.Millisecond, func() {
		n, _ := barrier.Wait(ctx, barrier.Config{AttemptFile: filepath.Join(runDir, "attempt"), Socket: filepath.Join(runDir, filepath.Base(barrier.DefaultSocket)),
			TerminationLog: filepath.Join(dir, "termination-log")})
		done <- n
	})
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}, PIDs: map[string]int{"bar": 4242}}
	r := New(rt, nil)
	r.ProcRoot = dir
	opened, err := r.OpenBarrier(context.Background(), makePod().barrier(running).obj(), 2)
	if !opened || err != nil || len(rt.Execs) != 0 {
		t.Fatalf("OpenBarrier = %v, %v with %d execs; want it opened through the socket once it listens", opened, err, len(rt.Execs))
	}
	if n := <-done; n != 2 {
		t.Errorf("the barrier opened for attempt %d, want 2", n)
	}
}

// procOfBar is a /proc (dir) whose process 4242 runs in container bar's cgroup, with an empty
// run directory (runDir) in its root: nobody listens there yet.
func procOfBar(t *testing.T) (dir, runDir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "proc") // short: a socket's path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	runDir = filepath.Join(dir, "4242", "root", "var", "run", "faultline")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"cgroup": "0::/kubepods/bar\n", "stat": "4242 (faultline-barr) S 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, "4242", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, runDir
}

// TestOpenBySocketFindsABarrierInTheWorkerOpened: a barrier in the worker container that
// opened for the attempt runs its worker, and no barrier waits on its socket; its attempt
// file says it opened. The agent that makes sure of a recorded open (after a
// restart of its own) finds it so through the socket's directory: nothing to do, no exec,
// and no "not listening yet" to ask again about forever.
func TestOpenBySocketFindsABarrierInTheWorkerOpened(t *testing.T) {
	dir, runDir := procOfBar(t)
	if err := barrier.WriteAttempt(filepath.Join(runDir, filepath.Base(barrier.AttemptFile)), 2); err != nil {
		t.Fatal(err)
	}
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("bar", 1)}, PIDs: map[string]int{"bar": 4242}}
	r := New(rt, nil)
	r.ProcRoot = dir
	r.Records = &records{rt: rt}
	a, err := r.Sync(context.Background(), inWorkerPod(1, "bar", &running, record("bar", 1, 2)), 2, true)
	if a != ActionNone || err != nil || len(rt.Execs) != 0 {
		t.Fatalf("Sync = %s, %v with %d execs; want nothing to do, found opened through the socket", a, err, len(rt.Execs))
	}
}

// TestOpenBySocketFollowsNoLink: the run volume is writable to a worker whose barrier is its
// entrypoint, and its program may leave a link where the next container's barrier will
// listen. The agent, which looks for that socket from the container's start on, never
// follows the link to the socket it names (here a decoy of the node's): it finds nobody
// waiting, and asks again later.
func TestOpenBySocketFollowsNoLink(t *testing.T) {
	dir, runDir := procOfBar(t)
	decoy := filepath.Join(dir, "node.sock")
	ln, err := net.Listen("unix", decoy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	if err := os.Symlink(decoy, filepath.Join(runDir, filepath.Base(barrier.DefaultSocket))); err != nil {
		t.Fatal(err)
	}
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{workerCtr("bar", 1)}, PIDs: map[string]int{"bar": 4242}}
	r := New(rt, nil)
	r.ProcRoot = dir
	r.Records = &records{rt: rt}
	_, err = r.OpenBarrier(context.Background(), inWorkerPod(1, "bar", &running, record("old", 0, 1)), 2)
	if !errors.Is(err, errNotYet) || len(rt.Execs) != 0 {
		t.Errorf("OpenBarrier: %v with %d execs; want nobody waiting yet, and no exec", err, len(rt.Execs))
	}
	select {
	case <-reached:
		t.Error("the agent followed the link to another socket of the node")
	default:
	}
}

// TestCRIEndpointIsFound: without --cri-endpoint the agent finds the node's CRI socket under
// the node's root as it sees it (a temporary root here): containerd's, then CRI-O's at either
// of its paths; a file that is no socket is not one; none found, it says where it looked.
func TestCRIEndpointIsFound(t *testing.T) {
	socketAt := func(root, rel string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	containerd, crio, crioRun, both, notSocket, none := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	socketAt(containerd, "run/containerd/containerd.sock")
	socketAt(crio, "var/run/crio/crio.sock")
	socketAt(crioRun, "run/crio/crio.sock")
	socketAt(both, "run/containerd/containerd.sock")
	socketAt(both, "var/run/crio/crio.sock")
	if err := os.MkdirAll(filepath.Join(notSocket, "run/containerd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notSocket, "run/containerd/containerd.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ root, want string }{
		"containerd":                    {containerd, "unix://" + filepath.Join(containerd, "run/containerd/containerd.sock")},
		"CRI-O":                         {crio, "unix://" + filepath.Join(crio, "var/run/crio/crio.sock")},
		"CRI-O under /run":              {crioRun, "unix://" + filepath.Join(crioRun, "run/crio/crio.sock")},
		"containerd before CRI-O":       {both, "unix://" + filepath.Join(both, "run/containerd/containerd.sock")},
		"a file that is no socket":      {notSocket, ""},
		"none: where it looked is said": {none, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, tried := FindEndpoint(tc.root)
			if got != tc.want {
				t.Errorf("FindEndpoint = %q, want %q (looked in %v)", got, tc.want, tried)
			}
			if tc.want == "" && (len(tried) != len(RuntimeSockets) || !strings.Contains(tried[1], "var/run/crio/crio.sock (CRI-O)")) {
				t.Errorf("looked in %v, want every runtime's place", tried)
			}
		})
	}
}
