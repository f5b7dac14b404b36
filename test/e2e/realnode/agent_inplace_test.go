package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealAgentRestartsAPodInPlace is the node side of issue 27's restart in place
// (docs/in-place-restart.md) on a real kubelet: a pod shaped as the controller is to build
// it (the faultline-barrier init container from its real image, the test worker with a
// RestartAllContainers rule, the run volume between them) and the node agent's restarter
// (pkg/nodeagent/inplace) talking to the node's real containerd over the CRI, as the agent
// would with its decisions. It shows:
//   - the first start waits at the barrier until OpenBarrier(1), and the worker reads
//     attempt 1 from the attempt file;
//   - StopOldWorkers(pod, 2) stops that worker (SIGTERM: it says it exits 143) and the
//     kubelet restarts every container in place (same pod, restartCount +1);
//   - the barrier holds: a late OpenBarrier(1) is refused (the file from the pod's previous
//     process never opens it) and the worker does not start for 2 s;
//   - the barrier's status says attempt=1 before the restart and nothing while it waits;
//   - OpenBarrier(2) starts the worker, which reads attempt 2 from the file, and the
//     barrier's termination message says attempt=2;
//   - stopping and opening again do nothing;
//
// and measures stop → barrier waiting and go → worker running.
func TestRealAgentRestartsAPodInPlace(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)

	node := c.Real.Nodes[len(c.Real.Nodes)-1]
	r, v, err := inplace.Dial(ctx, "unix://"+node.ContainerdSocket, slog.New(slog.NewTextHandler(tWriter{t}, nil)))
	if err != nil {
		t.Fatalf("the restarter cannot reach %s's containerd: %v", node.Name, err)
	}
	defer r.Close()
	t.Logf("CRI runtime on %s: %s %s (CRI %s)", node.Name, v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	// The node's agent (--cri-endpoint, as test/cluster starts it) reached the same runtime
	// before it was ready, and said so on its Node for the controller.
	if a := agents[node.Name]; a == nil {
		t.Errorf("no node agent on %s", node.Name)
	} else if b, err := os.ReadFile(a.LogPath); err != nil || !strings.Contains(string(b), "in-place restart available") {
		t.Errorf("the node agent of %s did not log that in-place restart is available (%v): %s", node.Name, err, a.Tail(10))
	}
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if cond := cluster.NodeCondition(n, v1alpha1.NodeConditionInPlaceReady); cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != v1alpha1.InPlaceReasonRuntimeReady {
		t.Errorf("node %s: %s %+v, want True %s", node.Name, v1alpha1.NodeConditionInPlaceReady, cond, v1alpha1.InPlaceReasonRuntimeReady)
	} else {
		t.Logf("node %s: %s=True %s: %s", node.Name, v1alpha1.NodeConditionInPlaceReady, cond.Reason, cond.Message)
	}

	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, agentInPlacePod("agent-inplace", node.Name), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create an in-place pod: %v", err)
	}
	w := &podWatch{t: t, c: c, ns: ns, sel: labels.SelectorFromSet(pod.Labels)}
	barrierIs := func(p *corev1.Pod) *corev1.ContainerStatus { return initStatus(p, v1alpha1.BarrierContainer) }

	// The first start waits at the barrier, whose status says nothing of an attempt.
	p := w.untilOrFail(ctx, "the barrier running", func(p *corev1.Pod) (bool, error) {
		// A barrier the kubelet will not start (its image, its security context) says so
		// at once rather than at the timeout.
		if b := barrierIs(p); b != nil && b.State.Waiting != nil && b.State.Waiting.Message != "" {
			return false, fmt.Errorf("the barrier waits: %s: %s", b.State.Waiting.Reason, b.State.Waiting.Message)
		}
		return running(barrierIs(p)), nil
	})
	holds(ctx, t, w, "first start")
	if stopped, err := r.StopOldWorkers(ctx, p, 1); err != nil || len(stopped) != 0 {
		t.Errorf("StopOldWorkers on a pod at its barrier: stopped %v, %v; want nothing", stopped, err)
	}
	goAt := time.Now()
	if opened, err := r.OpenBarrier(ctx, p, 1); err != nil || !opened {
		t.Fatalf("OpenBarrier(1) on a new pod's barrier: opened %v, %v", opened, err)
	}
	first := w.until(ctx, "the worker running", func(p *corev1.Pod) bool { return running(containerStatus(p, "worker")) })
	firstUp := time.Since(goAt)
	log1 := followWorker(ctx, t, c, ns, first.Name)
	log1.until(ctx, t, "attempt=1 ")
	// The kubelet copies the termination message into the status when it reads the
	// exited barrier: it may follow the worker's start by one status write.
	first = w.until(ctx, "the barrier's message", func(p *corev1.Pod) bool {
		b := barrierIs(p)
		return b.State.Terminated != nil && b.State.Terminated.Message != "" && running(containerStatus(p, "worker"))
	})
	if got := barrierIs(first).State.Terminated; got.ExitCode != 0 || got.Message != barrier.OpenedMessage(1) {
		t.Errorf("the opened barrier: exit %d message %q, want 0 %q", got.ExitCode, got.Message, barrier.OpenedMessage(1))
	}
	// Opening an open barrier does nothing.
	if opened, err := r.OpenBarrier(ctx, first, 1); err != nil || opened {
		t.Errorf("OpenBarrier(1) again: opened %v, %v; want a no-op", opened, err)
	}

	// The restart: the agent stops the old attempt's worker.
	worker1, barrier1 := containerStatus(first, "worker"), barrierIs(first)
	w.record()
	stopAt := time.Now()
	stopped, err := r.StopOldWorkers(ctx, first, 2)
	if err != nil || len(stopped) != 1 || stopped[0] != strings.TrimPrefix(worker1.ContainerID, "containerd://") {
		t.Fatalf("StopOldWorkers(2): stopped %v, %v; want the worker %s", stopped, err, worker1.ContainerID)
	}
	waiting := w.untilOrFail(ctx, "the barrier waiting again", func(p *corev1.Pod) (bool, error) {
		if ws := containerStatus(p, "worker"); running(ws) && ws.ContainerID != worker1.ContainerID {
			return false, fmt.Errorf("a new worker runs before the barrier ran again: %s", describePods([]*corev1.Pod{p}))
		}
		b := barrierIs(p)
		return running(b) && b.ContainerID != barrier1.ContainerID, nil
	})
	stopToWaiting := time.Since(stopAt)
	// The worker was asked to stop (SIGTERM), not killed: its own last words, from its log.
	log1.ended(ctx, t, "exiting 143")
	if waiting.UID != first.UID || waiting.Status.PodIP != first.Status.PodIP {
		t.Errorf("after the stop: pod %s ip %s, before %s ip %s: want the same pod", waiting.UID, waiting.Status.PodIP, first.UID, first.Status.PodIP)
	}
	if b := barrierIs(waiting); b.State.Terminated != nil {
		t.Errorf("the waiting barrier's state is terminated %+v: want no message while it waits", b.State.Terminated)
	}
	// Idempotent on the real thing: the old worker is gone, stopping again does nothing.
	if stopped, err := r.StopOldWorkers(ctx, first, 2); err != nil || len(stopped) != 0 {
		t.Errorf("StopOldWorkers(2) again with the old status: stopped %v, %v; want nothing", stopped, err)
	}
	// The attempt file holds 1 (the volume survived the restart): the pod's previous attempt
	// must not open the barrier, however late its go signal comes.
	if opened, err := r.OpenBarrier(ctx, waiting, 1); !errors.Is(err, inplace.ErrStale) || opened {
		t.Errorf("OpenBarrier(1) on a pod that ran attempt 1: opened %v, %v; want ErrStale", opened, err)
	}
	holds(ctx, t, w, "in-place restart")

	goAt = time.Now()
	if opened, err := r.OpenBarrier(ctx, waiting, 2); err != nil || !opened {
		t.Fatalf("OpenBarrier(2): opened %v, %v", opened, err)
	}
	execTook := time.Since(goAt)
	second := w.until(ctx, "the worker running again", func(p *corev1.Pod) bool {
		ws := containerStatus(p, "worker")
		return running(ws) && ws.ContainerID != worker1.ContainerID
	})
	secondUp := time.Since(goAt)
	history := w.recorded()
	log2 := followWorker(ctx, t, c, ns, second.Name)
	log2.until(ctx, t, "attempt=2 ")
	second = w.until(ctx, "the barrier's message", func(p *corev1.Pod) bool {
		b := barrierIs(p)
		return b.State.Terminated != nil && b.State.Terminated.Message != "" && running(containerStatus(p, "worker"))
	})
	if got := barrierIs(second).State.Terminated; got.ExitCode != 0 || got.Message != barrier.OpenedMessage(2) {
		t.Errorf("the barrier opened for 2: exit %d message %q, want 0 %q", got.ExitCode, got.Message, barrier.OpenedMessage(2))
	}
	ws, bs := containerStatus(second, "worker"), barrierIs(second)
	if second.UID != first.UID || ws.RestartCount != worker1.RestartCount+1 || bs.RestartCount != barrier1.RestartCount+1 {
		t.Errorf("after the restart: pod %s worker restartCount %d barrier %d; before: pod %s, %d, %d: want the same pod, each up by one",
			second.UID, ws.RestartCount, bs.RestartCount, first.UID, worker1.RestartCount, barrier1.RestartCount)
	}
	// The agent's decision now says there is nothing to do for attempt 2.
	if d := inplace.Decide(second, 2, true); d.Action != inplace.ActionNone {
		t.Errorf("Decide(pod, 2) after the restart: %+v, want None", d)
	}
	if a, err := r.Sync(ctx, second, 2, true); a != inplace.ActionNone || err != nil {
		t.Errorf("Sync(pod, 2) after the restart: %s, %v; want None", a, err)
	}
	if stopped, err := r.StopOldWorkers(ctx, second, 2); err != nil || len(stopped) != 0 {
		t.Errorf("StopOldWorkers(2) on the pod running 2: stopped %v, %v; want nothing", stopped, err)
	}
	t.Logf("first start: OpenBarrier(1) → worker running %s", firstUp.Round(time.Millisecond))
	t.Logf("in place: StopOldWorkers(2) → barrier waiting %s; OpenBarrier(2) → worker running %s (the call itself, list and exec: %s); updates:%s",
		stopToWaiting.Round(time.Millisecond), secondUp.Round(time.Millisecond), execTook.Round(time.Millisecond), describeSeen(history, stopAt))
}

// TestRealAgentLoopRestartsAPodInPlace drives the same restart through the agent's loop
// (inplace.Loop) as the agent is to run it: an informer on the pods, and decisions that the
// test changes as the controller would change a run's status (attempt 1 released; attempt
// 2 decided, barrier closed; attempt 2 released), each followed by RunChanged. Nothing
// calls the restarter directly: the loop stops the old worker on the decision, leaves the
// restarted pod at its barrier while the gang is not released, and opens it on the release.
// It measures decision → barrier waiting and release → worker running through the agent's
// own watch of the pod.
func TestRealAgentLoopRestartsAPodInPlace(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)

	node := c.Real.Nodes[0]
	log := slog.New(slog.NewTextHandler(tWriter{t}, nil))
	r, _, err := inplace.Dial(ctx, "unix://"+node.ContainerdSocket, log)
	if err != nil {
		t.Fatalf("the restarter cannot reach %s's containerd: %v", node.Name, err)
	}
	defer r.Close()
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods()
	decisions := &testDecisions{}
	loop := inplace.NewLoop(r, pods.Lister(), decisions, log)
	changed := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			loop.PodChanged(p)
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) }}); err != nil {
		t.Fatal(err)
	}
	// The informers and the loop end with the test, and are waited for: the loop logs to
	// the test's log.
	lctx, stop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	defer func() { stop(); factory.Shutdown(); <-loopDone }()
	factory.Start(lctx.Done())
	factory.WaitForCacheSync(lctx.Done())
	go func() { loop.Run(lctx, 2); close(loopDone) }()

	pod := agentInPlacePod("agent-loop", node.Name)
	pod.Labels[v1alpha1.LabelRun] = "llm"
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create an in-place pod: %v", err)
	}
	w := &podWatch{t: t, c: c, ns: ns, sel: labels.SelectorFromSet(pod.Labels)}
	barrierIs := func(p *corev1.Pod) *corev1.ContainerStatus { return initStatus(p, v1alpha1.BarrierContainer) }
	decide := func(attempt int, open bool) time.Time {
		decisions.set(attempt, open)
		loop.RunChanged(ns, "llm")
		return time.Now()
	}

	// Attempt 1, released from the start (a first attempt has no old worker to wait for).
	decide(1, true)
	first := w.until(ctx, "the worker running", func(p *corev1.Pod) bool { return running(containerStatus(p, "worker")) })
	followWorker(ctx, t, c, ns, first.Name).until(ctx, t, "attempt=1 ")
	worker1, barrier1 := containerStatus(first, "worker"), barrierIs(first)

	// Attempt 2 decided, the gang's barrier not open yet: the loop stops the old worker and
	// leaves the restarted pod at its barrier.
	w.record()
	decidedAt := decide(2, false)
	w.untilOrFail(ctx, "the barrier waiting again", func(p *corev1.Pod) (bool, error) {
		if ws := containerStatus(p, "worker"); running(ws) && ws.ContainerID != worker1.ContainerID {
			return false, fmt.Errorf("a new worker runs before the barrier ran again: %s", stateLine(p))
		}
		b := barrierIs(p)
		return running(b) && b.ContainerID != barrier1.ContainerID, nil
	})
	decidedToWaiting := time.Since(decidedAt)
	holds(ctx, t, w, "attempt 2 decided, not released")

	// Released: the loop opens the barrier.
	releasedAt := decide(2, true)
	second := w.until(ctx, "the worker running again", func(p *corev1.Pod) bool {
		ws := containerStatus(p, "worker")
		return running(ws) && ws.ContainerID != worker1.ContainerID
	})
	releasedToRunning := time.Since(releasedAt)
	history := w.recorded()
	followWorker(ctx, t, c, ns, second.Name).until(ctx, t, "attempt=2 ")
	if second.UID != first.UID || containerStatus(second, "worker").RestartCount != worker1.RestartCount+1 {
		t.Errorf("after the restart: pod %s worker %+v; want pod %s restarted once in place", second.UID, containerStatus(second, "worker"), first.UID)
	}
	t.Logf("through the loop: decision → barrier waiting %s; release → worker running %s; updates:%s",
		decidedToWaiting.Round(time.Millisecond), releasedToRunning.Round(time.Millisecond), describeSeen(history, decidedAt))
}

// testDecisions stands for the controller's decision in a run's status.
type testDecisions struct {
	mu      sync.Mutex
	attempt int
	open    bool
}

func (d *testDecisions) set(attempt int, open bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempt, d.open = attempt, open
}

func (d *testDecisions) For(*corev1.Pod) (int, bool, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.attempt, d.open, d.attempt > 0
}

// holds checks that the worker does not start while the barrier waits. 2 s is well above
// the 0.2-0.5 s the kubelet takes from an opened barrier to the worker's start.
func holds(ctx context.Context, t *testing.T, w *podWatch, when string) {
	t.Helper()
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if p, err := w.wait(hctx, func(p *corev1.Pod) bool {
		b := initStatus(p, v1alpha1.BarrierContainer)
		return running(containerStatus(p, "worker")) || b == nil || !running(b)
	}); err == nil {
		t.Errorf("%s: the barrier did not hold: %s %s", when, p.Status.Phase, stateLine(p))
	}
}

func stateLine(p *corev1.Pod) string {
	var parts []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		parts = append(parts, fmt.Sprintf("%s:%s#%d", cs.Name, stateOf(cs.State), cs.RestartCount))
	}
	return strings.Join(parts, " ")
}

// agentInPlacePod is a worker pod as docs/in-place-restart.md shapes it: restartPolicy
// Never; the faultline-barrier init container with the run volume; the test worker (a
// one-task JAX gang) with a rule that restarts every container in place on any non-zero
// exit, FAULTLINE_ATTEMPT_FILE and the run volume read-only. The barrier runs with no
// privilege at all. FAULTLINE_ATTEMPT stays 1, as in a pod created for attempt 1: the
// worker's attempt 2 can only come from the file.
func agentInPlacePod(name, node string) *corev1.Pod {
	mount := corev1.VolumeMount{Name: v1alpha1.RunVolume, MountPath: v1alpha1.RunDir}
	ro := mount
	ro.ReadOnly = true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers: []corev1.Container{{
				Name: v1alpha1.BarrierContainer, Image: cluster.BarrierImage, ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{mount},
				// The least the barrier can run with, as the controller is to give it: its
				// image's non-root user, no capability, nothing written outside the run
				// volume and its termination log.
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot:             ptr.To(true),
					ReadOnlyRootFilesystem:   ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Containers: []corev1.Container{{
				Name: "worker", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
				RestartPolicyRules: []corev1.ContainerRestartRule{{
					Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}},
				}},
				Env: append([]corev1.EnvVar{
					{Name: v1alpha1.EnvAttempt, Value: "1"},
					{Name: v1alpha1.EnvAttemptFile, Value: v1alpha1.AttemptFile},
				}, gangOfOne()...),
				VolumeMounts: []corev1.VolumeMount{ro},
			}},
			Volumes: []corev1.Volume{{Name: v1alpha1.RunVolume, VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi"))},
			}}},
		},
	}
}

// workerLogStream follows the current worker container's log through the kubelet, line by line,
// until the container ends.
type workerLogStream struct {
	lines chan string
	seen  []string
}

func followWorker(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, pod string) *workerLogStream {
	t.Helper()
	rc, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "worker", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow the worker's log: %v", err)
	}
	s := &workerLogStream{lines: make(chan string, 256)}
	go func() {
		defer rc.Close()
		defer close(s.lines)
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	return s
}

// until reads the log until a line contains want.
func (s *workerLogStream) until(ctx context.Context, t *testing.T, want string) string {
	t.Helper()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the worker's log ended without %q:\n%s", want, strings.Join(s.seen, "\n"))
			}
			s.seen = append(s.seen, l)
			if strings.Contains(l, want) {
				t.Logf("worker: %s", l)
				return l
			}
		case <-ctx.Done():
			t.Fatalf("no %q in the worker's log:\n%s", want, strings.Join(s.seen, "\n"))
		}
	}
}

// ended reads the log to its end (the container's) and requires a line with want.
func (s *workerLogStream) ended(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				for _, l := range s.seen {
					if strings.Contains(l, want) {
						t.Logf("worker: %s", l)
						return
					}
				}
				t.Errorf("the worker's log ended without %q:\n%s", want, strings.Join(s.seen, "\n"))
				return
			}
			s.seen = append(s.seen, l)
		case <-ctx.Done():
			t.Fatalf("the worker's log did not end:\n%s", strings.Join(s.seen, "\n"))
		}
	}
}

// tWriter sends the restarter's log to the test's.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var _ io.Writer = tWriter{}
