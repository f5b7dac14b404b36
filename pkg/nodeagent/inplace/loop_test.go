package inplace

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// decisionsFunc adapts a function to Decisions.
type decisionsFunc func(*corev1.Pod) (int, bool, bool)

func (f decisionsFunc) For(p *corev1.Pod) (int, bool, bool) { return f(p) }

// processAll processes what is queued and waits for the stops it started.
func processAll(l *Loop) {
	for l.queue.Len() > 0 {
		l.processNext(context.Background())
	}
	l.stopping.Wait()
}

// loopWith is a Loop over pods (in a real indexer) and a fake runtime; the tests drive it
// with processNext, one queued pod at a time, instead of its goroutines.
func loopWith(t *testing.T, rt *FakeRuntime, d Decisions, pods ...*corev1.Pod) *Loop {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	l := NewLoop(New(rt, nil), corelisters.NewPodLister(idx), d, nil)
	t.Cleanup(l.queue.ShutDown)
	return l
}

func inRun(p *corev1.Pod, run string) *corev1.Pod {
	p.Labels = map[string]string{v1alpha1.LabelRun: run}
	return p
}

func TestLoopStopsOnADecision(t *testing.T) {
	old := inRun(makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(), "llm")
	other := inRun(makePod().opened("attempt=1").worker("worker", "containerd://x1", running).obj(), "other")
	other.Name, other.UID = "other-0", "uid-2"
	plain := inRun(makePod().obj(), "llm")
	plain.Name, plain.Spec.InitContainers = "plain", nil
	rt := &FakeRuntime{Containers: []*runtimeapi.Container{ctr("w1", "uid-1", "worker", run), ctr("x1", "uid-2", "worker", run)}}
	decided := map[string]int{"llm": 2}
	l := loopWith(t, rt, decisionsFunc(func(p *corev1.Pod) (int, bool, bool) {
		n, ok := decided[p.Labels[v1alpha1.LabelRun]]
		return n, false, ok
	}), old, other, plain)

	// The run's decision changed: its in-place pods are queued, not the pod without a
	// barrier, not another run's.
	l.RunChanged("ml", "llm")
	if n := l.queue.Len(); n != 1 {
		t.Fatalf("queued %d pods, want llm-0 only", n)
	}
	processAll(l)
	if len(rt.Stops) != 1 || rt.Stops[0].ID != "w1" {
		t.Errorf("stops %v, want w1", rt.Stops)
	}
	// A pod whose run decided nothing is left alone.
	l.PodChanged(other)
	processAll(l)
	if len(rt.Stops) != 1 {
		t.Errorf("stops %v: the other run's pod was stopped", rt.Stops)
	}
}

func TestLoopRetriesFailuresButNotStaleAttempts(t *testing.T) {
	key := types.NamespacedName{Namespace: "ml", Name: "llm-0"}
	old := inRun(makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(), "llm")
	rt := &FakeRuntime{StopErr: status.Error(codes.Unavailable, "runtime down"),
		Containers: []*runtimeapi.Container{ctr("w1", "uid-1", "worker", run)}}
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, false, true }), old)
	l.PodChanged(old)
	processAll(l)
	if n := l.queue.NumRequeues(key); n != 1 {
		t.Errorf("a failed stop: %d requeues, want 1", n)
	}

	// A barrier that refuses the attempt as stale: the decision is older than the pod.
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	rt = &FakeRuntime{ExecExit: map[string]int32{"bar": openExitStale},
		Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
	l = loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 1, true, true }), atBarrier)
	l.PodChanged(atBarrier)
	l.processNext(context.Background())
	if len(rt.Execs) != 1 || l.queue.NumRequeues(key) != 0 || l.queue.Len() != 0 {
		t.Errorf("a stale attempt: execs %v, requeues %d, queued %d; want one exec and no retry", rt.Execs, l.queue.NumRequeues(key), l.queue.Len())
	}
}

// Run works the queue until its context ends.
func TestLoopRunOpensAndStops(t *testing.T) {
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
	opened := make(chan struct{})
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), atBarrier)
	l.syncer = syncerFunc(func(ctx context.Context, p *corev1.Pod, n int, open bool) (Action, error) {
		a, err := New(rt, nil).Sync(ctx, p, n, open)
		if a == ActionOpenBarrier {
			close(opened)
		}
		return a, err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, 2); close(done) }()
	l.PodChanged(atBarrier)
	<-opened
	cancel()
	<-done
	if len(rt.Execs) != 1 {
		t.Errorf("execs %v, want one open", rt.Execs)
	}
}

type syncerFunc func(context.Context, *corev1.Pod, int, bool) (Action, error)

func (f syncerFunc) OpenBarrier(ctx context.Context, p *corev1.Pod, n int) (bool, error) {
	a, err := f(ctx, p, n, true)
	return a == ActionOpenBarrier, err
}

func (f syncerFunc) Sync(ctx context.Context, p *corev1.Pod, n int, open bool) (Action, error) {
	return f(ctx, p, n, open)
}

// TestLoopStopsHoldNoOtherPod: a stop waits for the old workers to exit, up to their grace
// period (a run that checkpoints on SIGTERM: minutes); meanwhile the barriers of the node's
// other pods, of another run, open, with a single loop worker.
func TestLoopStopsHoldNoOtherPod(t *testing.T) {
	slow := inRun(makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(), "checkpointing")
	fast := inRun(makePod().barrier(running).obj(), "quick")
	fast.Name, fast.UID = "quick-0", "uid-2"
	block := make(chan struct{})
	rt := &FakeRuntime{StopBlock: block, ExitOnExec: true, Containers: []*runtimeapi.Container{
		ctr("w1", "uid-1", "worker", run), ctr("bar", "uid-2", v1alpha1.BarrierContainer, run)}}
	l := loopWith(t, rt, decisionsFunc(func(p *corev1.Pod) (int, bool, bool) {
		return 2, p.Labels[v1alpha1.LabelRun] == "quick", true
	}), slow, fast)
	l.PodChanged(slow)
	l.PodChanged(fast)
	l.processNext(context.Background()) // the stop: in flight
	l.processNext(context.Background()) // the other run's barrier
	rt.mu.Lock()
	execs, stops := len(rt.Execs), len(rt.Stops)
	rt.mu.Unlock()
	if execs != 1 || stops != 0 {
		t.Errorf("with a stop in flight: %d opens and %d stops done, want the other run's barrier opened and the stop still waiting", execs, stops)
	}
	close(block)
	l.stopping.Wait()
	if len(rt.Stops) != 1 || rt.Stops[0].ID != "w1" {
		t.Errorf("stops %v, want w1 once released", rt.Stops)
	}
}

// TestLoopOpensOnlyWhatTheAPIServerConfirms: the cache says the gang's barrier is open for
// attempt 2, the API server that the run is at attempt 3 already (the cache lags): the
// barrier stays shut, and is not retried (the run's next watch event queues it again); the
// API server confirming opens it.
func TestLoopOpensOnlyWhatTheAPIServerConfirms(t *testing.T) {
	key := types.NamespacedName{Namespace: "ml", Name: "llm-0"}
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), atBarrier)
	live := 3
	reads := 0
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) { reads++; return live, false, true, nil }
	l.PodChanged(atBarrier)
	processAll(l)
	waitQueue(t, l, confirmRetries+1)
	if len(rt.Execs) != 0 || reads != confirmRetries+1 || l.queue.NumRequeues(key) != 0 {
		t.Fatalf("opened on a stale cache, or read the run %d times (want %d, then left to the run's next change): execs %v, requeues %d",
			reads, confirmRetries+1, rt.Execs, l.queue.NumRequeues(key))
	}
	live = 2
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) { return live, true, true, nil }
	l.PodChanged(atBarrier)
	processAll(l)
	if len(rt.Execs) != 1 {
		t.Errorf("the API server confirms: execs %v, want one open", rt.Execs)
	}
}

// The loop tells Traced of each step it carried out on a pod: a stop, and an open timed from
// before its confirmation by the API server (a part of what the open costs); a refused
// confirmation, no step.
func TestLoopTracesItsSteps(t *testing.T) {
	old := inRun(makePod().opened("attempt=1").worker("worker", "containerd://w1", running).obj(), "llm")
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	atBarrier.Name, atBarrier.UID = "llm-1", "uid-2"
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("w1", "uid-1", "worker", run), ctr("bar", "uid-2", v1alpha1.BarrierContainer, run)}}
	decided := map[string]bool{}
	l := loopWith(t, rt, decisionsFunc(func(p *corev1.Pod) (int, bool, bool) { return 2, decided["open"], true }), old, atBarrier)
	type step struct {
		pod    string
		action Action
		took   time.Duration
		via    string
	}
	var steps []step
	l.Traced = func(_ context.Context, s Step) {
		if s.Attempt != 2 || s.Err != nil || s.End.Before(s.Start) {
			t.Errorf("traced %s %s: attempt %d, %s to %s, error %v", s.Pod.Name, s.Action, s.Attempt, s.Start, s.End, s.Err)
		}
		steps = append(steps, step{s.Pod.Name, s.Action, s.End.Sub(s.Start), s.Via})
	}
	confirm := time.Duration(0)
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) {
		time.Sleep(confirm)
		return 2, decided["open"], true, nil
	}
	l.PodChanged(old)
	processAll(l)
	// Refused by the API server: no open, nothing traced.
	decided["open"] = true
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) { return 2, false, true, nil }
	l.PodChanged(atBarrier)
	processAll(l)
	waitQueue(t, l, confirmRetries+1) // its reads again, refused too
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) {
		time.Sleep(confirm)
		return 2, true, true, nil
	}
	confirm = 20 * time.Millisecond
	l.PodChanged(atBarrier)
	processAll(l)
	if len(steps) != 2 || steps[0].pod != "llm-0" || steps[0].action != ActionStopWorkers || steps[1].pod != "llm-1" || steps[1].action != ActionOpenBarrier {
		t.Fatalf("traced %+v, want llm-0's stop then llm-1's open", steps)
	}
	// The fake runtime names no process of the barrier: the go signal went by exec.
	if steps[0].via != "" || steps[1].via != ViaExec {
		t.Errorf("traced the stop via %q and the open via %q; want none and %q", steps[0].via, steps[1].via, ViaExec)
	}
	if steps[1].took < confirm {
		t.Errorf("the open took %s, less than its confirmation's %s: the confirmation is not in it", steps[1].took, confirm)
	}
}

// A pod whose status lags the runtime (its old worker exited, the kubelet restarting it) has
// its barrier opened as soon as the runtime runs it, the gang's barrier open and the API
// server confirming; not before the runtime runs it (no read of the API server either), and
// not while the gang's barrier is closed.
func TestLoopOpensWhatTheRuntimeRuns(t *testing.T) {
	lagging := inRun(makePod().opened("attempt=1").worker("worker", "containerd://w1", exited143).obj(), "llm")
	rt := &FakeRuntime{ExitOnExec: true}
	open := false
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, open, true }), lagging)
	confirms := 0
	r := New(rt, nil)
	l.RuntimeBarrier = r.BarrierRunning

	confirmOpen := true
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) {
		confirms++
		return 2, confirmOpen, true, nil
	}
	for _, step := range []struct {
		what                string
		open, runs, confirm bool
		confirms            int
		execs               int
	}{
		{"the gang's barrier open, the runtime runs no barrier yet", true, false, true, 0, 0},
		{"the runtime runs the barrier, the gang's barrier closed", false, true, true, 0, 0},
		{"the runtime runs the barrier, the cache says open, the API server does not", true, true, false, 1, 0},
		{"the runtime runs the barrier, the gang's barrier open", true, true, true, 2, 1},
	} {
		open, confirmOpen = step.open, step.confirm
		if step.runs {
			rt.Containers = []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}
		}
		l.PodChanged(lagging)
		processAll(l)
		if confirms != step.confirms || len(rt.Execs) != step.execs {
			t.Fatalf("%s: %d confirmations, execs %v; want %d and %d", step.what, confirms, rt.Execs, step.confirms, step.execs)
		}
	}
}

// waitQueue processes what is queued, the rate-limited retries included, until n pods were
// processed or the queue stays empty for a second.
func waitQueue(t *testing.T, l *Loop, n int) {
	t.Helper()
	for done := 1; done < n; done++ {
		deadline := time.Now().Add(time.Second)
		for l.queue.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if l.queue.Len() == 0 {
			return
		}
		l.processNext(context.Background())
	}
}

// A refusal the API server's read gives while the cache shows the go signal is read again a
// few times (the read may have begun before the cache saw it, shared with another pod's),
// and opens once the read confirms.
func TestLoopReadsARefusalAgain(t *testing.T) {
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)}}
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), atBarrier)
	reads := 0
	l.Confirm = func(context.Context, *corev1.Pod) (int, bool, bool, error) { reads++; return 2, reads > 1, true, nil }
	l.PodChanged(atBarrier)
	processAll(l)
	waitQueue(t, l, 2)
	if reads != 2 || len(rt.Execs) != 1 {
		t.Errorf("%d reads, execs %v; want the refusal read again and the barrier opened", reads, rt.Execs)
	}
}

// A barrier the runtime runs that does not listen yet (its start event comes before its
// program listens) is opened again a moment later, without another event: seen on a real
// node, where the open through the socket came within a millisecond of the start and the
// pod, forgotten, waited for ever.
func TestLoopOpensABarrierThatListensLate(t *testing.T) {
	atBarrier := inRun(makePod().barrier(running).obj(), "llm")
	rt := &FakeRuntime{ExitOnExec: true, Containers: []*runtimeapi.Container{ctr("bar", "uid-1", v1alpha1.BarrierContainer, run)},
		ExecExit: map[string]int32{"bar": openExitNotWaiting}}
	l := loopWith(t, rt, decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 1, true, true }), atBarrier)
	l.PodChanged(atBarrier)
	processAll(l)
	if len(rt.Execs) != 1 {
		t.Fatalf("%d opens, want 1", len(rt.Execs))
	}
	rt.mu.Lock()
	rt.ExecExit = nil // it listens now
	rt.mu.Unlock()
	waitQueue(t, l, 2) // asked again, after the queue's backoff
	if len(rt.Execs) != 2 || rt.Containers[0].State != exited {
		t.Fatalf("%d opens, barrier %s: want it opened by a second one", len(rt.Execs), rt.Containers[0].State)
	}
}
