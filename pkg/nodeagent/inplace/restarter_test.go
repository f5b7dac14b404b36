package inplace

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func ctr(id, pod, name string, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, State: state, Labels: map[string]string{
		"io.kubernetes.pod.uid": pod, "io.kubernetes.container.name": name,
	}}
}

const (
	run    = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited = runtimeapi.ContainerState_CONTAINER_EXITED
)

// The pod's status names the old attempt's workers; the runtime holds them, the pod's
// sidecar and another pod's worker. Only the old workers are stopped, with the pod's grace
// period, and a second call stops nothing.
func TestStopOldWorkers(t *testing.T) {
	pod := makePod().opened("attempt=1").worker("worker", "containerd://w1", running).worker("helper", "containerd://h1", running).obj()
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](7)
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{
		ctr("bar", "uid-1", v1alpha1.BarrierContainer, exited),
		ctr("side", "uid-1", "sidecar", run),
		ctr("w1", "uid-1", "worker", run),
		ctr("h1", "uid-1", "helper", run),
		ctr("other", "uid-2", "worker", run),
	}}
	r := New(rt, nil)
	stopped, err := r.StopOldWorkers(context.Background(), pod, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []FakeStop{{ID: "w1", Timeout: 7}, {ID: "h1", Timeout: 7}}
	if diff := cmp.Diff(want, rt.Stops); diff != "" || len(stopped) != 2 {
		t.Errorf("stops (-want +got):\n%s; returned %v", diff, stopped)
	}
	// The same (now stale) status again: they are stopped, nothing is stopped twice.
	if stopped, err := r.StopOldWorkers(context.Background(), pod, 2); err != nil || len(stopped) != 0 || len(rt.Stops) != 2 {
		t.Errorf("second call: stopped %v, %v; stops %d, want none more", stopped, err, len(rt.Stops))
	}
}

// A status read before the pod restarted names the old containers; the kubelet has since
// started new ones for the new attempt. They are never stopped.
func TestStopOldWorkersNeverStopsTheNewAttempt(t *testing.T) {
	stale := makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj()
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{ctr("w2", "uid-1", "worker", run)}}
	if stopped, err := New(rt, nil).StopOldWorkers(context.Background(), stale, 2); err != nil || len(stopped) != 0 || len(rt.Stops) != 0 {
		t.Errorf("stopped %v, %v, stops %v: want none", stopped, err, rt.Stops)
	}
}

func TestStopOldWorkersErrors(t *testing.T) {
	pod := makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj()
	newRT := func() *FakeRuntime {
		return &FakeRuntime{Containers: []*runtimeapi.Container{ctr("w1", "uid-1", "worker", run)}}
	}
	rt := newRT()
	rt.StopErr = status.Error(codes.NotFound, "gone")
	if _, err := New(rt, nil).StopOldWorkers(context.Background(), pod, 2); err != nil {
		t.Errorf("a container removed meanwhile: %v, want no error", err)
	}
	rt = newRT()
	rt.StopErr = status.Error(codes.Unavailable, "down")
	if _, err := New(rt, nil).StopOldWorkers(context.Background(), pod, 2); err == nil {
		t.Error("runtime down: no error")
	}
	rt = newRT()
	rt.ListErr = errors.New("down")
	if _, err := New(rt, nil).StopOldWorkers(context.Background(), pod, 2); err == nil {
		t.Error("list failed: no error")
	}
}

func TestOpenBarrier(t *testing.T) {
	waitingPod := makePod().barrier(running).obj()
	cmd := []string{"/faultline-barrier", "open", "--attempt", "2"}
	for name, tc := range map[string]struct {
		pod        *corev1.Pod
		containers []*runtimeapi.Container
		exit       int32
		execErr    error
		killed     bool // the barrier's exit killed the exec (137)
		opened     bool
		wantErr    error
		execs      int
	}{
		"a waiting barrier opens": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run), ctr("side", "uid-1", "sidecar", run)},
			opened:     true, execs: 1,
		},
		// The runtime says the barrier runs before the pod's status does.
		"the status still shows the old worker": {
			pod:        makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(),
			containers: []*runtimeapi.Container{ctr("bar2", "uid-1", v1alpha1.BarrierContainer, run)},
			opened:     true, execs: 1,
		},
		"opened already: the barrier exited": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, exited)},
		},
		// Nobody listens while the container runs: a barrier not listening yet (the
		// runtime's start event comes first), or one opened a moment ago on its way out;
		// the loop asks again until it listens or has ended.
		"nobody waits while it runs: asked again": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
			exit:       openExitNotWaiting, execs: 1, wantErr: errNotYet,
		},
		"the pod ran the attempt already: refused": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
			exit:       openExitStale, execs: 1, wantErr: ErrStale,
		},
		"the pod is ending": {
			pod:        makePod().barrier(running).phase(corev1.PodFailed).obj(),
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
		},
		"another pod's barrier": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-2", v1alpha1.BarrierContainer, run)},
		},
		// The barrier's exit ends the container and kills the exec before it answers: its
		// exit code 0 says it opened.
		"the barrier's exit killed the exec": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
			killed:     true, opened: true, execs: 1,
		},
		"exec fails on a running barrier": {
			pod:        waitingPod,
			containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
			execErr:    status.Error(codes.Internal, "no exec"), execs: 1, wantErr: errAny,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &FakeRuntime{Containers: tc.containers, ExecErr: tc.execErr, ExitOnExec: true, ExecKilled: tc.killed}
			if tc.exit != 0 {
				rt.ExecExit = map[string]int32{tc.containers[0].Id: tc.exit}
			}
			opened, err := New(rt, nil).OpenBarrier(context.Background(), tc.pod, 2)
			switch {
			case tc.wantErr == errAny && err == nil, tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if opened != tc.opened || len(rt.Execs) != tc.execs {
				t.Errorf("opened %v after %d execs, want %v after %d", opened, len(rt.Execs), tc.opened, tc.execs)
			}
			for _, e := range rt.Execs {
				if !cmp.Equal(e.Cmd, cmd) {
					t.Errorf("exec %q, want %q", e.Cmd, cmd)
				}
			}
		})
	}
}

var errAny = errors.New("any error")

// Sync follows the decision: stop the old workers, then (the gang released) open the
// barrier of the restarted pod, then nothing.
func TestSync(t *testing.T) {
	ctx := context.Background()
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("w1", "uid-1", "worker", run)}}
	r := New(rt, nil)
	old := makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj()
	if a, err := r.Sync(ctx, old, 2, false); a != ActionStopWorkers || err != nil || len(rt.Stops) != 1 {
		t.Fatalf("old workers: %s, %v, stops %v", a, err, rt.Stops)
	}
	// The kubelet restarted the pod: its barrier waits.
	rt.Containers = append(rt.Containers, ctr("bar2", "uid-1", v1alpha1.BarrierContainer, run))
	atBarrier := makePod().barrier(running).worker("worker", "", restarting).obj()
	if a, err := r.Sync(ctx, atBarrier, 2, false); a != ActionWait || err != nil || len(rt.Execs) != 0 {
		t.Fatalf("gang not released: %s, %v, execs %v", a, err, rt.Execs)
	}
	if a, err := r.Sync(ctx, atBarrier, 2, true); a != ActionOpenBarrier || err != nil || len(rt.Execs) != 1 {
		t.Fatalf("gang released: %s, %v, execs %v", a, err, rt.Execs)
	}
	done := makePod().opened("attempt=2").worker("worker", "containerd://w2", running).obj()
	if a, err := r.Sync(ctx, done, 2, true); a != ActionNone || err != nil || len(rt.Stops) != 1 || len(rt.Execs) != 1 {
		t.Fatalf("runs attempt 2: %s, %v, stops %v execs %v", a, err, rt.Stops, rt.Execs)
	}
}

// Sync of a pod whose status lags opens nothing, even with the runtime running its barrier
// and the gang's barrier open in the cache: only the loop opens it, once the API server
// confirms (TestLoopOpensWhatTheRuntimeRuns).
func TestSyncNeverOpensWhatTheStatusDoesNotShow(t *testing.T) {
	lagging := makePod().opened("attempt=1").worker("worker", "containerd://w1", exited143).obj()
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
	if a, err := New(rt, nil).Sync(context.Background(), lagging, 2, true); err != nil || a != ActionWait || len(rt.Execs) != 0 {
		t.Fatalf("Sync: %s, %v, execs %v; want Wait and no exec", a, err, rt.Execs)
	}
}
