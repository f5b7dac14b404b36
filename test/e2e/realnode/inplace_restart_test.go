package realnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/tracing"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/hops"
	"github.com/faultline-dev/faultline/test/otlp"
)

// TestRealInPlaceRestartKeepsHealthyPods (issue 27): a 4-worker run with restartMode InPlace
// across both real nodes; logind announces a shutdown of the node without the coordinator.
// The controller keeps the attempt's Job and the pods of the node that stays up: the node
// agent there stops their workers through the CRI, the kubelet restarts each pod in place
// (same UID, node, restartCount of the worker up by exactly one) and holds it at its barrier;
// the shut-down node's indexes get new pods, made for attempt 2, on the node that stays up.
// Once no old worker runs the barrier opens, and attempt 2's coordinator (index 0, restarted
// in place) registers every index exactly once.
//
// It runs alone: the node it shuts down is every scenario's. It brings the node back.
func TestRealInPlaceRestartKeepsHealthyPods(t *testing.T) {
	sc := sharedInPlaceShutdown(t)
	got, moving, up := sc.got, sc.moving, sc.up
	rec := got.Status.Attempts[len(got.Status.Attempts)-1]
	if rec.RestartMode != v1alpha1.RestartModeInPlace || rec.JobAttempt != 1 || !slices.Equal(rec.MovedIndexes, moving) || rec.BarrierOpenedAt == nil {
		t.Errorf("attempt 2's record: restartMode %q jobAttempt %d movedIndexes %v barrierOpenedAt %v; want InPlace, 1, %v, set",
			rec.RestartMode, rec.JobAttempt, rec.MovedIndexes, rec.BarrierOpenedAt, moving)
	}

	now := sc.after
	for i := range 4 {
		p, old := now[i], sc.before[i]
		switch {
		case p == nil:
			t.Errorf("index %d has no live pod", i)
		case slices.Contains(moving, int32(i)):
			if p.UID == old.UID || p.Spec.NodeName != up.Name || p.Labels[v1alpha1.LabelAttempt] != "2" {
				t.Errorf("moved index %d: pod %s (uid %s) on %s, attempt label %s; want a new pod for attempt 2 on %s", i, p.Name, p.UID, p.Spec.NodeName, p.Labels[v1alpha1.LabelAttempt], up.Name)
			}
		default:
			w, w0 := workerStatus(p), workerStatus(old)
			if p.UID != old.UID || p.Spec.NodeName != old.Spec.NodeName || w == nil || w0 == nil || w.RestartCount != w0.RestartCount+1 {
				t.Errorf("index %d on the healthy node: pod %s uid %s node %s worker %+v; before: uid %s node %s worker %+v; want the same pod, its worker restarted once",
					i, p.Name, p.UID, p.Spec.NodeName, w, old.UID, old.Spec.NodeName, w0)
			}
		}
	}
	// The gang rendezvoused once: attempt 2's coordinator registered each index once.
	log, tasks := sc.coordinatorLog, sc.tasks
	if strings.Join(tasks, ",") != eachOnce(4) || strings.Contains(log, "REFUSED") {
		t.Errorf("attempt 2's coordinator registered tasks %v, want each of 0-3 once:\n%s", tasks, log)
	}
	if !strings.Contains(log, "attempt=2") {
		t.Errorf("attempt 2's coordinator does not say attempt 2 (its attempt file):\n%s", log)
	}
}

// TestRealInPlaceBarrier (issue 27): in the same in-place restart, no worker of attempt 2
// starts before the last worker of attempt 1 has stopped, on either node. The order is the
// API server's: one watch of the run's pods delivers every status the kubelets wrote in the
// order they were stored, so "stopped" events that all come before the first "running" of
// the new attempt prove it, whatever the clocks. It logs how long the barrier held: from the
// first old worker seen stopped to the first new one seen running. It reads the restart
// TestRealInPlaceRestartKeepsHealthyPods reads (sharedInPlaceShutdown), whose coordinator
// lingers 5 s after its stop, so that a barrier that opened early would be seen.
func TestRealInPlaceBarrier(t *testing.T) {
	sc := sharedInPlaceShutdown(t)
	lastStop, firstStart := -1, -1
	var tFirstStop, tLastStop, tFirstStart time.Time
	sc.stopped = map[int]bool{}
	for seq, e := range sc.events() {
		if i, ok := sc.oldWorkerStopped(e); ok && !sc.stopped[i] {
			sc.stopped[i] = true
			lastStop, tLastStop = seq, e.at
			if len(sc.stopped) == 1 {
				tFirstStop = e.at
			}
		}
		if sc.newWorkerRunning(e) && firstStart < 0 {
			firstStart, tFirstStart = seq, e.at
		}
	}
	if len(sc.stopped) != 4 || firstStart < 0 {
		t.Fatalf("the watch saw %d of 4 old workers stop and a new one start: %v", len(sc.stopped), firstStart >= 0)
	}
	if firstStart < lastStop {
		t.Errorf("a worker of attempt 2 ran (event %d) before the last worker of attempt 1 stopped (event %d)", firstStart, lastStop)
	}
	t.Logf("barrier held %s: first old worker stopped -> last stopped %s -> first new running %s",
		tFirstStart.Sub(tFirstStop).Round(time.Millisecond), tLastStop.Sub(tFirstStop).Round(time.Millisecond), tFirstStart.Sub(tLastStop).Round(time.Millisecond))
}

// TestRealInPlaceRestartTraced (issue 41): the same restart, as the package's collector got
// it. Per restarted pod, faultline's steps (the agent's stop and open, in the restart's
// trace) and the kubelet's own work on the pod (its syncs' CRI calls, joined on the pod's
// UID: the old containers removed, the barrier started, the worker started) are all there,
// in the order the invariant needs; it logs the hop table (test/hops).
func TestRealInPlaceRestartTraced(t *testing.T) {
	if traces == nil {
		t.Skip("no collector (-real-traces=false)")
	}
	sc := sharedInPlaceShutdown(t)
	ep, err := waitBreakdown(sc.got, sc.before, sc.after, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ep.Pods {
		// The gang's barrier opens once no old worker runs, maybe before a pod's barrier
		// container started; the agent opens a pod's once both are so: once the runtime says
		// the barrier runs, which may be before the kubelet's call that started it returns.
		// The worker may start before the open returns (the barrier exits first).
		order := []time.Time{ep.Decided, p.BarrierStarting, p.OpenBegan, p.WorkerStarted}
		if p.InPlace {
			order = []time.Time{p.StopBegan, p.Stopped, p.Removed, p.BarrierStarting, p.OpenBegan, p.WorkerStarted}
		}
		if !slices.IsSortedFunc(order, func(a, b time.Time) int { return a.Compare(b) }) || p.OpenBegan.Before(ep.BarrierOpen) || p.WorkerStarted.Before(p.BarrierStarted) {
			t.Errorf("pod %s (in place %t): its moments out of order: %s", p.Name, p.InPlace, describeTimes(ep, p))
		}
		if p.InPlace && ep.BarrierOpen.Before(p.Stopped) {
			t.Errorf("pod %s: the gang's barrier opened before its old worker stopped: %s", p.Name, describeTimes(ep, p))
		}
		// The agent runs in the node's PID namespace: it reaches each barrier's socket.
		if p.OpenVia != inplace.ViaSocket {
			t.Errorf("pod %s: the agent gave its barrier the go signal by %q, want %q (no exec)", p.Name, p.OpenVia, inplace.ViaSocket)
		}
	}
	t.Logf("the restart by hop (trace %s):\n%s", ep.TraceID, hops.Table(ep))
}

// waitBreakdown waits until the package's collector has every moment of run's last restart
// for the pods of its new attempt (after, by index; restarted in place where before has the
// same pod), and returns it; with an error, what it got.
func waitBreakdown(run *v1alpha1.TrainingRun, before, after map[int]*corev1.Pod, w *apiWatch) (hops.Episode, error) {
	if run.Status.Trace == nil {
		return hops.Episode{}, fmt.Errorf("run %s has no trace of its restart", run.Name)
	}
	root, ok := tracing.ParseTraceparent(run.Status.Trace.Traceparent)
	if !ok {
		return hops.Episode{}, fmt.Errorf("run %s: traceparent %q", run.Name, run.Status.Trace.Traceparent)
	}
	var pods []hops.Pod
	for i, p := range after {
		old := before[i]
		_, place := attempt.BarrierContainer(&p.Spec)
		hp := hops.Pod{UID: string(p.UID), Name: p.Name, InPlace: old != nil && old.UID == p.UID, InWorker: place == attempt.BarrierInWorker,
			Spare: attempt.MadeAsSpare(p)}
		if old != nil && !hp.InPlace {
			hp.OldUID = string(old.UID)
			if w != nil {
				hp.API = w.moved(p.UID, old)
			}
		}
		pods = append(pods, hp)
	}
	// The kubelet exports every 5 s (its batch processor's default).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ep hops.Episode
	var err error
	if _, werr := traces.WaitFor(ctx, func(spans []otlp.Span) bool {
		ep, err = hops.Breakdown(spans, root.TraceID().String(), pods)
		return err == nil && ep.Complete()
	}); werr != nil {
		var missing []string
		for _, p := range ep.Pods {
			missing = append(missing, fmt.Sprintf("%s (in place %t): %s", p.Name, p.InPlace, describeTimes(ep, p)))
		}
		return ep, fmt.Errorf("the collector lacks moments of run %s's restart (trace %s): %v; got:\n%s", run.Name, root.TraceID(), err, strings.Join(missing, "\n"))
	}
	return ep, nil
}

func describeTimes(ep hops.Episode, p hops.PodTimes) string {
	at := func(x time.Time) string {
		if x.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.3fs", x.Sub(ep.Decided).Seconds())
	}
	return fmt.Sprintf("stop %s-%s, removed %s, barrier started %s-%s, barrier open %s, open %s-%s, worker started %s, Running %s (from the decision)",
		at(p.StopBegan), at(p.Stopped), at(p.Removed), at(p.BarrierStarting), at(p.BarrierStarted), at(ep.BarrierOpen), at(p.OpenBegan), at(p.Opened), at(p.WorkerStarted), at(ep.Running))
}

// The two named tests read one in-place restart: every node shutdown of the package costs a
// shutdown and a return of a real node (its agent's DaemonSet pod replaced, with the
// DaemonSet controller's backoff growing at each), and one restart shows both.
var inPlaceOnce struct {
	sync.Once
	sc   *inPlaceScenario
	by   string
	done bool
}

// sharedInPlaceShutdown runs inPlaceShutdown once for the package, in the first test that
// asks, and gives every test what it recorded. The coordinator (index 0, restarted in place)
// outlives the SIGTERM of its stop by 5 s: a barrier that did not wait for the last old
// worker would let the other pods' new workers run meanwhile.
func sharedInPlaceShutdown(t *testing.T) *inPlaceScenario {
	t.Helper()
	// Skipped here, not in the scenario: a skip inside Do would read as its failure.
	cluster.Shared(t)
	inPlaceOnce.Do(func() {
		inPlaceOnce.by = t.Name()
		inPlaceOnce.sc = inPlaceShutdown(t, "inplace", "--sigterm-delay", "5s", "--sigterm-delay-index", "0")
		inPlaceOnce.done = true
	})
	if !inPlaceOnce.done {
		t.Fatalf("the in-place restart scenario failed in %s", inPlaceOnce.by)
	}
	return inPlaceOnce.sc
}

// inPlaceScenario is one in-place restart on the real nodes (inPlaceShutdown), as the tests
// read it.
type inPlaceScenario struct {
	ctx      context.Context
	c        *cluster.Cluster
	ns       string
	run      *v1alpha1.TrainingRun
	got      *v1alpha1.TrainingRun // the run with attempt 2 Running
	before   map[int]*corev1.Pod   // attempt 1's pods by index
	moving   []int32               // the indexes on the node that went down
	up, down *cluster.RealNode
	stopped  map[int]bool
	// after are the live pods by index once attempt 2 is Running; coordinatorLog and tasks
	// what attempt 2's coordinator logged and the tasks it registered.
	after          map[int]*corev1.Pod
	coordinatorLog string
	tasks          []string

	mu   sync.Mutex
	seen []podEvent
}

type podEvent struct {
	at      time.Time
	pod     *corev1.Pod
	deleted bool
}

func (sc *inPlaceScenario) events() []podEvent {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Clone(sc.seen)
}

// inPlaceShutdown: a 4-worker run with restartMode InPlace across both real nodes; logind
// announces a shutdown of the node without the coordinator, and the test waits for attempt 2
// Running and checks the verdict. A watch of the run's pods records every change from the
// announcement on. It brings the node back when the test ends.
func inPlaceShutdown(t *testing.T, name string, workerArgs ...string) *inPlaceScenario {
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	// The workers notice a lost task by its heartbeats only, after 10 s: the controller's
	// decision and the agents' stops come first, so that each healthy pod restarts once.
	run := createRun(ctx, t, c, ns, realRun(name, 4, append([]string{"--heartbeats-only", "--heartbeat-timeout", "10s"}, workerArgs...), withRestartMode(v1alpha1.RestartModeInPlace)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 4)
	sc := &inPlaceScenario{ctx: ctx, c: c, ns: ns, run: run, before: map[int]*corev1.Pod{}, stopped: map[int]bool{}}
	sc.up = c.Real.Node(first[0].Spec.NodeName) // the coordinator's node stays up
	for _, n := range c.Real.Nodes {
		if n != sc.up {
			sc.down = n
		}
	}
	for _, p := range first {
		if !slices.ContainsFunc(p.Spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == v1alpha1.BarrierContainer }) {
			t.Fatalf("pod %s has no %s init container: the run's pods do not restart in place", p.Name, v1alpha1.BarrierContainer)
		}
		i := attempt.IndexOrNone(p)
		sc.before[i] = p
		if p.Spec.NodeName == sc.down.Name {
			sc.moving = append(sc.moving, int32(i))
		}
	}
	if len(sc.moving) == 0 || len(sc.moving) == 4 {
		t.Fatalf("attempt 1 has %d of 4 workers on %s: the gang must span both real nodes", len(sc.moving), sc.down.Name)
	}
	slices.Sort(sc.moving)
	t.Cleanup(func() { bringBack(t, c, sc.down) })

	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	go func() {
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok {
				sc.mu.Lock()
				sc.seen = append(sc.seen, podEvent{at: time.Now(), pod: p, deleted: e.Type == watch.Deleted})
				sc.mu.Unlock()
			}
		}
	}()

	announced := time.Now()
	if err := sc.down.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	sc.got = waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, sc.got, 2)
	t.Logf("PrepareForShutdown(true) -> attempt 2 Running in %s", time.Since(announced).Round(time.Millisecond))
	if f := sc.got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseNodeShutdown || f.Node != sc.down.Name {
		t.Errorf("verdict: %s; want NodeShutdown on %s", describeRun(sc.got), sc.down.Name)
	}
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	sc.after = map[int]*corev1.Pod{}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil && cluster.PodLive(p) {
			sc.after[attempt.IndexOrNone(p)] = p
		}
	}
	sc.coordinatorLog, sc.tasks = registeredTasks(ctx, t, c, ns, run.Name, 2, 4)
	// Every old worker has stopped by now, unless the barrier opened early: then the
	// coordinator's ends a moment later (its 5 s); the watch records it meanwhile.
	deadline := time.Now().Add(30 * time.Second)
	for len(stoppedWorkers(sc)) < len(sc.before) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // re-read what the watch has recorded meanwhile
	}
	return sc
}

// stoppedWorkers are the indexes whose attempt-1 worker the watch has seen stopped.
func stoppedWorkers(sc *inPlaceScenario) map[int]bool {
	stopped := map[int]bool{}
	for _, e := range sc.events() {
		if i, ok := sc.oldWorkerStopped(e); ok {
			stopped[i] = true
		}
	}
	return stopped
}

// oldWorkerStopped says whether e shows the attempt-1 worker of its pod's index not running
// (any more): the worker not running, or restarted since; or its pod gone, as its last
// version shows it: its worker not running, or its node agent's word that the shutdown
// stopped the pod at the runtime (exitclass.StoppedByShutdown: the controller removes such a
// pod at once, before its kubelet's status says it ended). A pod removed while its last
// status and its agent say that its worker may run is no stop.
func (sc *inPlaceScenario) oldWorkerStopped(e podEvent) (int, bool) {
	i := attempt.IndexOrNone(e.pod)
	old := sc.before[i]
	if old == nil || e.pod.UID != old.UID {
		return i, false
	}
	w := workerStatus(e.pod)
	notRunning := w == nil || w.State.Running == nil || w.RestartCount > workerStatus(old).RestartCount
	return i, notRunning || e.deleted && exitclass.StoppedByShutdown(e.pod)
}

// newWorkerRunning says whether e shows a worker of attempt 2 running: in a new pod, or in a
// pod of attempt 1 restarted since.
func (sc *inPlaceScenario) newWorkerRunning(e podEvent) bool {
	w := workerStatus(e.pod)
	if e.deleted || w == nil || w.State.Running == nil {
		return false
	}
	old := sc.before[attempt.IndexOrNone(e.pod)]
	return old == nil || e.pod.UID != old.UID || w.RestartCount > workerStatus(old).RestartCount
}

func workerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == "worker" {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}
