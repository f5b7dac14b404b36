package realnode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealRestartAllContainersInPlace is the substrate under issue 27's in-place restart
// (docs/in-place-restart.md): the real kubelet's RestartAllContainers action (KEP-5532) in
// the shape the design gives a worker pod, in an Indexed Job shaped as faultline's. The
// restartPolicy Never pod has a sidecar, a barrier init container (the pause image: it
// blocks until SIGTERM, then exits 0, so the test's SIGTERM through the node's containerd is
// the barrier's go signal) and the test worker, whose rule restarts every container of the
// pod in place on any non-zero exit. The test stops the worker through containerd, as the
// node agent would through the CRI's StopContainer (SIGTERM in round 1, SIGKILL in round 2),
// and observes: the same pod (UID, IP, node); the AllContainersRestarting condition and the
// phases meanwhile; the worker's lastState as the kubelet writes it, and whether its real
// exit code reaches the API; the sidecar and the barrier re-run, the barrier holding the new
// worker back until its go signal; no backoff in round 2; the Job controller seeing nothing
// (one active pod, no failure); and the times: stop → barrier running again (every old
// container gone) and go → worker running.
//
// It is not one of issue 27's named tests: those use faultline's restart; this one shows
// what the kubelet and the Job controller do that they build on.
func TestRealRestartAllContainersInPlace(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)

	node := c.Real.Nodes[0]
	// Auto mode's signal (docs/in-place-restart.md): the kubelet declares the feature on its
	// Node (NodeDeclaredFeatures), and the scheduler keeps pods with the rule off nodes that
	// do not.
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	declared := false
	for _, f := range n.Status.DeclaredFeatures {
		declared = declared || f == "RestartAllContainersOnContainerExits"
	}
	if !declared {
		t.Errorf("node %s declares %v: want RestartAllContainersOnContainerExits", node.Name, n.Status.DeclaredFeatures)
	}

	// The pod comes from an Indexed Job shaped as faultline's (podReplacementPolicy Failed,
	// backoffLimitPerIndex 0, a podFailurePolicy that fails the index on any non-zero exit):
	// the real Job controller must see nothing of the restarts in place.
	pod := inPlacePod("inplace", node.Name)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "inplace"},
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			Completions:          ptr.To[int32](1),
			Parallelism:          ptr.To[int32](1),
			BackoffLimitPerIndex: ptr.To[int32](0),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailIndex,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}},
			}}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
	if job, err = c.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a Job whose pod has a RestartAllContainers rule: %v", err)
	}
	sel := labels.SelectorFromSet(pod.Labels)
	w := &podWatch{t: t, c: c, ns: ns, sel: sel}

	// The first start goes through the barrier too.
	p := w.until(ctx, "the barrier running", func(p *corev1.Pod) bool { return running(initStatus(p, "barrier")) })
	if ws := containerStatus(p, "worker"); ws != nil && ws.State.Running != nil {
		t.Fatalf("the worker runs while the barrier holds: %+v", ws.State)
	}
	w.stop(ctx, node, initStatus(p, "barrier"), "SIGTERM")
	before := w.until(ctx, "the worker running", func(p *corev1.Pod) bool {
		return running(containerStatus(p, "worker")) && running(initStatus(p, "keeper"))
	})
	first := before

	// Round 1 stops the worker as the agent's StopContainer does with a timeout (SIGTERM: the
	// worker exits 143), round 2 as with timeout 0 (SIGKILL: 137).
	for round, signal := range []string{"SIGTERM", "SIGKILL"} {
		before = restartInPlace(ctx, t, w, node, before, round+1, signal)
	}
	if before.UID != first.UID {
		t.Errorf("the pod after both rounds is %s, the first was %s: the Job replaced it", before.UID, first.UID)
	}

	// The Job controller saw one active pod throughout: no failure, no replacement, no
	// podFailurePolicy match.
	j, err := c.Client.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Active != 1 || j.Status.Failed != 0 || j.Status.FailedIndexes != nil && *j.Status.FailedIndexes != "" || len(j.Status.Conditions) != 0 {
		t.Errorf("Job status after two restarts in place: active %d failed %d failedIndexes %v conditions %v: want one active pod and nothing else",
			j.Status.Active, j.Status.Failed, ptr.Deref(j.Status.FailedIndexes, ""), j.Status.Conditions)
	} else {
		t.Logf("Job status after two restarts in place: active %d ready %d failed %d, no condition", j.Status.Active, ptr.Deref(j.Status.Ready, 0), j.Status.Failed)
	}
}

// restartInPlace stops the pod's worker with SIGTERM, waits for the barrier to run again,
// checks that the worker stays down while it does, opens the barrier and waits for the
// worker to run again; it checks what the kubelet wrote on the way and returns the pod as
// it is then.
func restartInPlace(ctx context.Context, t *testing.T, w *podWatch, node *cluster.RealNode, before *corev1.Pod, round int, signal string) *corev1.Pod {
	t.Helper()
	worker0, barrier0, keeper0 := containerStatus(before, "worker"), initStatus(before, "barrier"), initStatus(before, "keeper")
	w.record()
	stoppedAt := w.stop(ctx, node, worker0, signal)
	// A worker that runs again before its barrier did was restarted alone (a container
	// restart, not RestartAllContainers): say so at once rather than time out.
	held := w.untilOrFail(ctx, "the barrier running again", func(p *corev1.Pod) (bool, error) {
		if ws := containerStatus(p, "worker"); running(ws) && ws.ContainerID != worker0.ContainerID {
			return false, fmt.Errorf("the worker runs again in a new container before the barrier ran again: %s", describePods([]*corev1.Pod{p}))
		}
		b := initStatus(p, "barrier")
		return running(b) && b.ContainerID != barrier0.ContainerID, nil
	})
	heldAt := time.Now()
	// The barrier holds: the worker does not start however long it waits. 2 s is well
	// above the 0.2-0.5 s the kubelet took from the barrier's start to the worker's in
	// the first start above.
	hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
	if p, err := w.wait(hctx, func(p *corev1.Pod) bool { return running(containerStatus(p, "worker")) }); err == nil {
		t.Errorf("round %d: the worker started while the barrier held: %s", round, describePods([]*corev1.Pod{p}))
	}
	hcancel()
	goAt := w.stop(ctx, node, initStatus(held, "barrier"), "SIGTERM")
	after := w.until(ctx, "the worker running again", func(p *corev1.Pod) bool {
		ws := containerStatus(p, "worker")
		return running(ws) && ws.ContainerID != worker0.ContainerID
	})
	upAt := time.Now()
	history := w.recorded()

	// The same pod: the kubelet restarted its containers, nobody made a new one.
	if after.UID != before.UID || after.Status.PodIP != before.Status.PodIP || after.Spec.NodeName != before.Spec.NodeName {
		t.Errorf("round %d: pod after the restart: uid %s ip %s node %s; before: uid %s ip %s node %s", round,
			after.UID, after.Status.PodIP, after.Spec.NodeName, before.UID, before.Status.PodIP, before.Spec.NodeName)
	}
	ws, bs, ks := containerStatus(after, "worker"), initStatus(after, "barrier"), initStatus(after, "keeper")
	if ws.RestartCount != worker0.RestartCount+1 || bs.RestartCount != barrier0.RestartCount+1 || ks.RestartCount != keeper0.RestartCount+1 {
		t.Errorf("round %d: restartCount worker %d barrier %d sidecar %d (were %d, %d, %d): want each up by one", round,
			ws.RestartCount, bs.RestartCount, ks.RestartCount, worker0.RestartCount, barrier0.RestartCount, keeper0.RestartCount)
	}
	// The sidecar was restarted too (a new container), not left running.
	if !running(ks) || ks.ContainerID == keeper0.ContainerID {
		t.Errorf("round %d: sidecar after the restart: %+v; before: container %s", round, ks, keeper0.ContainerID)
	}
	// The kubelet's own mark that this was RestartAllContainers and not a container restart:
	// the lastState it synthesizes for every container it removed. It stays, unlike the
	// condition below.
	if lt := ws.LastTerminationState.Terminated; lt == nil || lt.Reason != restartingAllContainers {
		t.Errorf("round %d: worker lastState %+v: want the reason %s", round, ws.LastTerminationState, restartingAllContainers)
	} else {
		t.Logf("round %d: worker lastState: exit %d reason %q message %q", round, lt.ExitCode, lt.Reason, lt.Message)
	}

	// What the API showed meanwhile: the condition, the phases, the worker's exit codes.
	var condTrue *podSeen
	phases := map[corev1.PodPhase]bool{}
	codes := map[int32]string{}
	for i := range history {
		h := &history[i]
		phases[h.phase] = true
		if h.cond != nil && h.cond.Status == corev1.ConditionTrue && condTrue == nil {
			condTrue = h
		}
		if h.worker != nil {
			codes[h.worker.ExitCode] = h.worker.Reason
		}
	}
	// AllContainersRestarting=True is transient: it is set and cleared within one PLEG
	// relist, and the kubelet's status manager may merge both into one write (CI saw a
	// SIGKILL round go from running straight to waiting(RestartingAllContainers) with the
	// condition False). Logged, not required: faultline detects the restart by restartCount.
	if condTrue == nil {
		t.Logf("round %d: no %s=True seen during the restart (merged by the status manager)", round, corev1.AllContainersRestarting)
	} else {
		t.Logf("round %d: %s=True reason %q message %q seen %s after the stop", round, corev1.AllContainersRestarting,
			condTrue.cond.Reason, condTrue.cond.Message, condTrue.at.Sub(stoppedAt).Round(time.Millisecond))
	}
	if phases[corev1.PodFailed] || phases[corev1.PodSucceeded] {
		t.Errorf("round %d: pod phases during the restart %v: an in-place restart must not end the pod", round, phases)
	}
	t.Logf("round %d: worker exit codes the API showed (state or lastState): %v; phases %v", round, codes, phases)
	t.Logf("round %d: worker "+signal+" → barrier running again (every old container gone): %s; barrier's go → worker running: %s; updates:%s",
		round, heldAt.Sub(stoppedAt).Round(time.Millisecond), upAt.Sub(goAt).Round(time.Millisecond), describeSeen(history, stoppedAt))
	return after
}

// restartingAllContainers is the reason the kubelet writes into the lastState of every
// container it removed for RestartAllContainers (v1.36 has no API constant for it).
const restartingAllContainers = "RestartingAllContainers"

// inPlacePod: a restartPolicy Never pod on node with a barrier init container (pause: it
// exits 0 on SIGTERM only) and the test worker as a one-task gang that runs until it is
// stopped, with a rule that restarts every container in place on any non-zero exit.
func inPlacePod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			InitContainers: []corev1.Container{{
				// A sidecar (a restartable init container) before the barrier: it runs
				// while the barrier holds, as the agent of JobSet's design would.
				Name: "keeper", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			}, {
				Name: "barrier", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
			Containers: []corev1.Container{{
				Name: "worker", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever),
				RestartPolicyRules: []corev1.ContainerRestartRule{{
					Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}},
				}},
				Env: gangOfOne(),
			}},
		},
	}
}

// podWatch watches the test's one pod; while recording, it keeps every update it sees.
type podWatch struct {
	t   *testing.T
	c   *cluster.Cluster
	ns  string
	sel labels.Selector

	mu        sync.Mutex
	recording bool
	history   []podSeen
}

// podSeen is one update of the pod as the watch saw it.
type podSeen struct {
	at     time.Time
	phase  corev1.PodPhase
	cond   *corev1.PodCondition
	worker *corev1.ContainerStateTerminated // the worker's state or else lastState, if terminated
	state  string
}

func (w *podWatch) record() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recording, w.history = true, nil
}

func (w *podWatch) recorded() []podSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recording = false
	return w.history
}

// wait watches the pod until cond holds for it (the current pod counts) and returns it.
func (w *podWatch) wait(ctx context.Context, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	return w.waitOrFail(ctx, func(p *corev1.Pod) (bool, error) { return cond(p), nil })
}

// waitOrFail is wait with a condition that can also give up.
func (w *podWatch) waitOrFail(ctx context.Context, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var got *corev1.Pod
	pods, err := w.c.WaitPods(ctx, w.ns, w.sel, func(pods []*corev1.Pod) (bool, error) {
		if len(pods) != 1 {
			return false, nil
		}
		p := pods[0]
		w.note(p)
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended: phase %s", p.Status.Phase)
		}
		ok, err := cond(p)
		if ok {
			got = p
		}
		return ok, err
	})
	if err != nil {
		return nil, fmt.Errorf("%w; pods %s", err, describePods(pods))
	}
	return got, nil
}

func (w *podWatch) until(ctx context.Context, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	w.t.Helper()
	return w.untilOrFail(ctx, what, func(p *corev1.Pod) (bool, error) { return cond(p), nil })
}

func (w *podWatch) untilOrFail(ctx context.Context, what string, cond func(*corev1.Pod) (bool, error)) *corev1.Pod {
	w.t.Helper()
	p, err := w.waitOrFail(ctx, cond)
	if err != nil {
		w.t.Fatalf("%s: %v; seen %s", what, err, describeSeen(w.recorded(), time.Now()))
	}
	return p
}

func (w *podWatch) note(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.recording {
		return
	}
	s := podSeen{at: time.Now(), phase: p.Status.Phase}
	if cd := podCondition(p, corev1.AllContainersRestarting); cd != nil {
		s.cond = cd.DeepCopy()
	}
	var parts []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		parts = append(parts, fmt.Sprintf("%s:%s#%d", cs.Name, stateOf(cs.State), cs.RestartCount))
		if cs.Name == "worker" {
			if cs.State.Terminated != nil {
				s.worker = cs.State.Terminated
			} else if cs.LastTerminationState.Terminated != nil {
				s.worker = cs.LastTerminationState.Terminated
			}
		}
	}
	s.state = strings.Join(parts, " ")
	w.history = append(w.history, s)
}

// stop signals a container's process through the node's containerd, as the node agent
// would through the CRI, and returns when it did.
func (w *podWatch) stop(ctx context.Context, node *cluster.RealNode, cs *corev1.ContainerStatus, signal string) time.Time {
	w.t.Helper()
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	at := time.Now()
	if out, err := w.c.Real.Ctr(ctx, node, "-n", "k8s.io", "tasks", "kill", "--signal", signal, id); err != nil {
		w.t.Fatalf("ctr tasks kill --signal %s %s (%s): %v\n%s", signal, id, cs.Name, err, out)
	}
	return at
}

func running(cs *corev1.ContainerStatus) bool { return cs != nil && cs.State.Running != nil }

func stateOf(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%d %s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ")"
	}
	return "-"
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

// describeSeen lists the pod's updates, timed from from.
func describeSeen(history []podSeen, from time.Time) string {
	var b strings.Builder
	for _, h := range history {
		fmt.Fprintf(&b, "\n  %+6dms %s %s", h.at.Sub(from).Milliseconds(), h.phase, h.state)
		if h.cond != nil {
			fmt.Fprintf(&b, " %s=%s(%s)", h.cond.Type, h.cond.Status, h.cond.Reason)
		}
	}
	return b.String()
}
