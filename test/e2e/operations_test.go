package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// The cluster's daily operations, as the tools that run them do them: a planned move is no
// failure, whichever of its signals the controller sees first.

// noInfraBudget leaves a run no infrastructure restart: a drain judged as a failure would fail
// it, where a planned one moves it.
var noInfraBudget = withMaxRestarts(v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](0)})

// TestE2EKubectlDrainSpendsNoBudget: an operator runs the real `kubectl drain` on the node of
// a gang (as a node-pool upgrade does: cordon, then evict through the Eviction API). The gang
// moves off the node in a planned restart that spends no budget (the run has none), whether
// the controller acts on the cordon before the evictions, or only sees a worker evicted (its
// cordon signal off): the evicted worker's DisruptionTarget on a cordoned node is a planned
// maintenance, not a failure.
func TestE2EKubectlDrainSpendsNoBudget(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"the cordon seen first": nil,
		"only the eviction":     {"--maintenance-cordon=false"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, c, ns, _ := scenarioWith(t, func(string) []string { return args })
			nodes, onPool := nodePool(ctx, t, c, ns, 2)
			run, pods := runningRun(ctx, t, c, ns, newRun("drained", 2, withoutGPUs(), onPool, noInfraBudget))
			if got := onNodes(pods); !slices.Equal(got, []string{nodes[0]}) {
				t.Fatalf("the run's workers are on %v, want all on %s", got, nodes[0])
			}
			kubectl(ctx, t, c, "drain", nodes[0], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
			moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running, or the run Failed", runningOrFailed(2))
			if moved.Status.Phase == v1alpha1.PhaseFailed {
				t.Fatalf("the drain failed the run: %s", describeRun(moved))
			}
			requireRestarts(t, moved, v1alpha1.RestartCounts{})
			lf := moved.Status.LastFailure
			if lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance {
				t.Fatalf("lastFailure %+v, want PlannedMaintenance", lf)
			}
			if args != nil && !slices.ContainsFunc(lf.Evidence, func(s string) bool { return strings.Contains(s, "EvictionByEvictionAPI") }) {
				t.Errorf("evidence %q does not name the eviction, the only signal this controller acts on", lf.Evidence)
			}
			if got := onNodes(waitWorkers(ctx, t, c, ns, run.Name, 2, 2)); !slices.Equal(got, []string{nodes[1]}) {
				t.Errorf("attempt 2 runs on %v, want %s", got, nodes[1])
			}
		})
	}
}

// TestE2EKarpenterDisruptionIsPlanned: Karpenter disrupts a node as its docs say: it taints it
// karpenter.sh/disrupted:NoSchedule (no cordon) and evicts its pods through the Eviction API.
// The gang moves off it in a planned restart that spends no budget, and its next attempt keeps
// off the tainted node.
func TestE2EKarpenterDisruptionIsPlanned(t *testing.T) {
	t.Parallel()
	ctx, c, ns := maintenanceScenario(t)
	nodes, onPool := nodePool(ctx, t, c, ns, 2)
	run, pods := runningRun(ctx, t, c, ns, newRun("consolidated", 2, withoutGPUs(), onPool, noInfraBudget))
	node, err := c.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule})
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		evict(ctx, t, c, p)
	}
	moved := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running, or the run Failed", runningOrFailed(2))
	if moved.Status.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("Karpenter's disruption failed the run: %s", describeRun(moved))
	}
	requireRestarts(t, moved, v1alpha1.RestartCounts{})
	if lf := moved.Status.LastFailure; lf == nil || lf.Cause != v1alpha1.CausePlannedMaintenance ||
		!slices.ContainsFunc(lf.Evidence, func(s string) bool { return strings.Contains(s, v1alpha1.TaintKarpenterDisrupted) }) {
		t.Errorf("lastFailure %+v, want PlannedMaintenance with Karpenter's taint as evidence", lf)
	}
	if got := onNodes(waitWorkers(ctx, t, c, ns, run.Name, 2, 2)); !slices.Equal(got, []string{nodes[1]}) {
		t.Errorf("attempt 2 runs on %v, want %s", got, nodes[1])
	}
}

// runningOrFailed: attempt n Running, or the run Failed, which ends the wait at once (a
// planned move judged a failure fails a run that has no budget).
func runningOrFailed(n int32) func(*v1alpha1.TrainingRun) bool {
	return func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseFailed || runningAttempt(n)(r)
	}
}

// kubectl runs the pinned kubectl against the cluster, as an operator would.
func kubectl(ctx context.Context, t *testing.T, c *cluster.Cluster, args ...string) {
	t.Helper()
	out, err := c.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
}

// evict asks the Eviction API for the pod to go, as drains and autoscalers do; a pod already
// gone is fine.
func evict(ctx context.Context, t *testing.T, c *cluster.Cluster, p *corev1.Pod) {
	t.Helper()
	err := c.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(fmt.Errorf("evict pod %s: %w", p.Name, err))
	}
}

// TestE2EOwnStorageLimitIsApplication: a worker writes past its own ephemeral-storage limit,
// and the kubelet evicts its pod for it (status Evicted, with the kubelet's own words). That
// is a bug of the program or its spec, which a restart repeats: the run fails at once, class
// Application, cause LimitExceeded, its budgets untouched. A worker evicted for the node's
// pressure, within its limits, stays Infrastructure: the gang restarts on the budget.
func TestE2EOwnStorageLimitIsApplication(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	own, ownPods := runningRun(ctx, t, c, ns, newRun("scratch", 2, withoutGPUs()))
	failWorker(ctx, t, c, ownPods[1], cluster.Failure{ExitCode: 137, Reason: "Error", PodReason: "Evicted",
		PodMessage: `Container worker exceeded its local ephemeral storage limit "1Gi". `})
	pressure, pressurePods := runningRun(ctx, t, c, ns, newRun("pressured", 2, withoutGPUs()))
	failWorker(ctx, t, c, pressurePods[1], cluster.Failure{ExitCode: 137, Reason: "Error", PodReason: "Evicted",
		PodMessage: "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. "})

	failed := waitRun(ctx, t, c, ns, own.Name, "Failed, or restarted", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Attempt > 1
	})
	if lf := failed.Status.LastFailure; lf == nil || lf.Class != v1alpha1.ClassApplication || lf.Cause != v1alpha1.CauseLimitExceeded || lf.Pod != ownPods[1].Name {
		t.Errorf("lastFailure %+v, want Application/LimitExceeded on %s", lf, ownPods[1].Name)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{})
	restarted := waitRun(ctx, t, c, ns, pressure.Name, "attempt 2 Running", runningAttempt(2))
	if lf := restarted.Status.LastFailure; lf == nil || lf.Class != v1alpha1.ClassInfrastructure || lf.Cause != v1alpha1.CauseEviction {
		t.Errorf("lastFailure %+v, want Infrastructure/Eviction for node pressure", lf)
	}
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
}

// TestE2EVanishedWorkerIsJudged: a worker is evicted and ends while no reconcile sees it (its
// controller is down, as during an upgrade of the controller or a change of leader). Held by
// its finalizer, the worker stays, Failed as the kubelet left it, until the controller is back:
// the attempt is judged on it (an eviction from a node nobody takes away: Infrastructure, on
// the budget) and the gang restarts. Before, the worker went at once, and the controller,
// back, took its index for one whose pod was never made: a new process joined the running
// gang, and no verdict was ever written.
func TestE2EVanishedWorkerIsJudged(t *testing.T) {
	t.Parallel()
	ctx, c, ns, ctrl := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("vanish", 2, withoutGPUs()))
	victim := pods[1]
	ctrl.Stop()
	evict(ctx, t, c, victim)
	// What a kubelet does: the evicted worker's containers end, and it turns Failed; a pod
	// that nothing holds goes then.
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = nil
			return true, nil
		}
		last = p
		return err == nil && p.Status.Phase == corev1.PodFailed, err
	})
	if err != nil {
		t.Fatalf("the evicted worker %s never ended: %v (last %+v)", victim.Name, err, last)
	}
	if last == nil {
		t.Logf("the evicted worker %s went before the controller was back", victim.Name)
	} else {
		t.Logf("the evicted worker %s is Failed, held by %v", victim.Name, last.Finalizers)
	}
	startController(t, ns)

	restarted := waitRun(ctx, t, c, ns, run.Name, "attempt 2 Running, or the run Failed", runningOrFailed(2))
	if restarted.Status.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("the run failed: %s", describeRun(restarted))
	}
	lf := restarted.Status.LastFailure
	if lf == nil || lf.Pod != victim.Name || lf.Cause != v1alpha1.CauseEviction || lf.Class != v1alpha1.ClassInfrastructure {
		t.Fatalf("lastFailure %+v, want Infrastructure/Eviction on %s", lf, victim.Name)
	}
	requireRestarts(t, restarted, v1alpha1.RestartCounts{Infrastructure: 1})
}
