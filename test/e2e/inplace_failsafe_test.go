package e2e

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EInPlaceStalledNamesThePod: a gang that restarts in place across two kwok nodes loses
// one node hard (kwok stops simulating it). Its workers are judged NodeLost once the node has
// been unreachable for as long as they tolerate it (2 s here), and the gang restarts in place:
// the lost node's indexes move, and the barrier waits for their old pods to be gone, which
// cannot happen (the node will never confirm their end). The run says so: Stalled
// NodeUnreachable, naming each old pod and its node, and how to free it; no worker of the
// new attempt runs meanwhile.
func TestE2EInPlaceStalledNamesThePod(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t, "--barrier-image", kwokBarrierImage)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	for _, n := range nodes {
		if err := c.MakeInPlaceCapable(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SimulateInPlace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	run, pods := runningRun(ctx, t, c, ns, newRun("stuck", 4, withoutGPUs(), onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
		r.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelRun: "stuck"}},
		}}
		r.Spec.Template.Spec.Tolerations = append(r.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)})
	}))
	lost := pods[1].Spec.NodeName
	var onLost []string
	for _, p := range pods {
		if p.Spec.NodeName == lost {
			onLost = append(onLost, p.Name)
		}
	}
	if len(onLost) == len(pods) {
		t.Fatalf("every worker on %s: the gang must span both nodes to restart in place", lost)
	}
	if err := c.StopNode(ctx, lost); err != nil {
		t.Fatal(err)
	}
	// The moved pods are deleted one by one, and the condition is written as each deletion
	// is seen: it first names those seen so far, then every one.
	stalled := waitRun(ctx, t, c, ns, run.Name, "Stalled on every one of the lost node's old pods", func(r *v1alpha1.TrainingRun) bool {
		cond := runCondition(r, v1alpha1.ConditionStalled)
		return cond != nil && cond.Status == metav1.ConditionTrue && !slices.ContainsFunc(onLost, func(name string) bool {
			return !strings.Contains(cond.Message, name)
		})
	})
	if lf := stalled.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CauseNodeLost || lf.Node != lost {
		t.Errorf("lastFailure %+v, want NodeLost on %s", lf, lost)
	}
	if rec := attempt.Record(stalled); rec == nil || rec.RestartMode != v1alpha1.RestartModeInPlace || rec.BarrierOpenedAt != nil {
		t.Fatalf("attempt 2's record %+v: want a restart in place whose barrier is shut", rec)
	}
	cond := runCondition(stalled, v1alpha1.ConditionStalled)
	if cond.Reason != v1alpha1.ReasonNodeUnreachable {
		t.Errorf("Stalled reason %s, want %s", cond.Reason, v1alpha1.ReasonNodeUnreachable)
	}
	for _, want := range append(onLost, "node "+lost, corev1.TaintNodeOutOfService) {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Stalled message %q does not name %q", cond.Message, want)
		}
	}
	if waiting := runCondition(stalled, v1alpha1.ConditionInPlaceWaiting); waiting == nil || waiting.Status != metav1.ConditionTrue {
		t.Errorf("InPlaceWaiting %+v, want True while the barrier waits", waiting)
	}
	for _, p := range podsOfAttempt(ctx, t, c, ns, run.Name, 2) {
		if n, _ := attempt.Running(&p); n == 2 && cluster.PodRunning(&p) {
			t.Errorf("pod %s runs attempt 2 while the lost node's workers may still run", p.Name)
		}
	}
}

// TestE2EStaleAgentViewNeverOpensANewAttempt: the node agent's view of the run lags one
// attempt behind (its informer still shows attempt 1, its barrier open) when attempt 2 is
// decided in place and a pod is made for it. That pod's barrier never opens: not for attempt
// 1 (the pod was made for 2), and not for 2 until the API server itself says the gang's
// barrier is open for 2. Once the view catches up, attempt 2 runs, every pod of it for
// attempt 2.
func TestE2EStaleAgentViewNeverOpensANewAttempt(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t, "--barrier-image", kwokBarrierImage)
	nodes, onPool := nodePool(ctx, t, c, ns, 1)
	if err := c.MakeInPlaceCapable(ctx, nodes[0]); err != nil {
		t.Fatal(err)
	}
	view := &laggingView{}
	if err := c.SimulateInPlaceWith(ctx, ns, cluster.InPlaceSim{View: view.over}); err != nil {
		t.Fatal(err)
	}
	run, pods := runningRun(ctx, t, c, ns, newRun("lagging", 2, withoutGPUs(), onPool, func(r *v1alpha1.TrainingRun) {
		r.Spec.FailurePolicy.RestartMode = v1alpha1.RestartModeInPlace
	}))
	view.freeze()
	// Index 1 ends: its pod is replaced by one made for attempt 2 (a failed pod restarts
	// nothing in place), which starts at its barrier on the node of the lagging agent.
	failWorker(ctx, t, c, pods[1], cluster.Failure{ExitCode: 143, Reason: "Error", Message: "terminated"})
	waitRun(ctx, t, c, ns, run.Name, "attempt 2 decided in place", func(r *v1alpha1.TrainingRun) bool {
		rec := attempt.Record(r)
		return r.Status.Attempt == 2 && rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace
	})
	if _, err := c.WaitPods(ctx, ns, attemptSelector(run.Name, 2), func(ps []*corev1.Pod) (bool, error) {
		return len(ps) == 1 && barrierWaits(ps[0]), nil
	}); err != nil {
		t.Fatalf("index 1's pod for attempt 2 not at its barrier: %v", err)
	}
	// The lagging agent sees attempt 1 with its barrier open for a while: it must open
	// nothing of attempt 2.
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	opened, err := c.WaitPods(wctx, ns, attemptSelector(run.Name, 2), func(ps []*corev1.Pod) (bool, error) {
		return slices.ContainsFunc(ps, func(p *corev1.Pod) bool { return !barrierWaits(p) }), nil
	})
	if err == nil {
		t.Fatalf("a pod made for attempt 2 left its barrier on a stale view (attempt 1): %s", describePods(opened))
	}
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	view.thaw()
	// The informer catches up: the run's next change queues its pods again.
	touch := fmt.Sprintf(`{"metadata":{"annotations":{"test.faultline.dev/touched":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if err := runClient(t, c).Patch(ctx, run, client.RawPatch(types.MergePatchType, []byte(touch))); err != nil {
		t.Fatal(err)
	}
	running := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running", runningAttempt(2))
	requireRestarts(t, running, v1alpha1.RestartCounts{Unknown: 1})
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || !cluster.PodRunning(&p) {
			continue
		}
		live++
		if msg := barrierMessage(&p); msg != "attempt=2" {
			t.Errorf("pod %s (made for attempt %s): its barrier opened with %q, want attempt=2", p.Name, p.Labels[v1alpha1.LabelAttempt], msg)
		}
	}
	if live != 2 {
		t.Errorf("%d pods run, want 2", live)
	}
}

// laggingView is the agents' view of the runs' decisions, which a test freezes at what it
// was (an informer that lags) and thaws.
type laggingView struct {
	mu     sync.Mutex
	frozen map[string][3]any // by run: attempt, barrier open, ok as last seen before the freeze
	live   inplace.Decisions
	stuck  bool
}

func (v *laggingView) over(d inplace.Decisions) inplace.Decisions {
	v.live = d
	return v
}

func (v *laggingView) For(p *corev1.Pod) (int, bool, bool) {
	n, open, ok := v.live.For(p)
	v.mu.Lock()
	defer v.mu.Unlock()
	key := p.Namespace + "/" + p.Labels[v1alpha1.LabelRun]
	if !v.stuck {
		if v.frozen == nil {
			v.frozen = map[string][3]any{}
		}
		v.frozen[key] = [3]any{n, open, ok}
		return n, open, ok
	}
	if f, seen := v.frozen[key]; seen {
		return f[0].(int), f[1].(bool), f[2].(bool)
	}
	return n, open, ok
}

func (v *laggingView) freeze() { v.mu.Lock(); v.stuck = true; v.mu.Unlock() }

func (v *laggingView) thaw() { v.mu.Lock(); v.stuck = false; v.mu.Unlock() }

// barrierMessage is the termination message of p's barrier ("attempt=N" once opened).
func barrierMessage(p *corev1.Pod) string {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == v1alpha1.BarrierContainer && cs.State.Terminated != nil {
			return cs.State.Terminated.Message
		}
	}
	return ""
}
