package realnode

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealInPlaceWorkerExitAfterBarrierIsJudged (issue 27): a worker of a pod that restarts
// in place and exits non-zero on its own fires its pod's RestartAllContainers rule: the
// kubelet removes every container of the pod and its status shows a synthesized 137
// (RestartingAllContainers), the real exit at best in one status write. The node agent
// reports the real exit on the pod (faultline.dev/worker-exit), and the controller judges
// the attempt by it as by any failure.
//
// A 2-worker run with restartMode InPlace, one worker per real node. In attempt 1 the test
// SIGTERMs index 1's worker through its node's containerd (neither the kubelet nor the
// agent asks it): it exits 143, a bare SIGTERM, Unknown, and the run restarts in place
// into attempt 2 (no index moves). In attempt 2, once the test saw it Running, the same
// worker exits 1 on its own (the test's SIGUSR1 tells it when: a timer after the gang formed
// raced the kubelets' status writes of Ready, seconds on a loaded machine): the run fails
// fast, AppExit, naming that exit, with no restart of the application budget spent.
func TestRealInPlaceWorkerExitAfterBarrierIsJudged(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 4*time.Minute)
	startController(t, c, ns)

	// The coordinator notices a lost task only after a minute: nothing but the test and
	// the worker's own failure ends a worker.
	run := createRun(ctx, t, c, ns, realRun("exits", 2, []string{"--heartbeats-only", "--heartbeat-timeout", "60s",
		"--fail-index", "1", "--fail-attempt", "2", "--fail", "exit", "--fail-on-usr1"}, withRestartMode(v1alpha1.RestartModeInPlace)))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	first := waitWorkers(ctx, t, c, ns, run.Name, 1, 2)
	victim := first[1]
	if !inPlaceShaped(victim) {
		t.Fatalf("pod %s has no in-place shape: the run's pods do not restart in place", victim.Name)
	}
	node := c.Real.Node(victim.Spec.NodeName)

	sigtermRestartsInPlace(ctx, t, c, node, run.Name, victim)

	restarted, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	killWorker(ctx, t, c, node, restarted, "SIGUSR1")
	failed := waitRun(ctx, t, c, ns, run.Name, "Failed", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Attempt > 2
	})
	f := failed.Status.LastFailure
	if failed.Status.Phase != v1alpha1.PhaseFailed || f == nil || f.Class != v1alpha1.ClassApplication || f.Cause != v1alpha1.CauseAppExit ||
		f.ExitCode == nil || *f.ExitCode != 1 || f.Index == nil || *f.Index != 1 || f.Pod != victim.Name {
		t.Fatalf("run: %s; want Failed, AppExit of index 1's exit 1 (pod %s)", describeRun(failed), victim.Name)
	}
	if failed.Status.Attempt != 2 || failed.Status.Restarts != (v1alpha1.RestartCounts{Unknown: 1}) {
		t.Errorf("attempt %d restarts %+v; want attempt 2, one Unknown restart", failed.Status.Attempt, failed.Status.Restarts)
	}
	ex := requireExitReport(ctx, t, c, victim, 2, 1)
	if finished, err := time.Parse(time.RFC3339Nano, ex.FinishedAt); err == nil && f.DecidedAt != nil {
		t.Logf("index 1's worker exited 1 in attempt 2 -> run Failed (decided) %s later", f.DecidedAt.Sub(finished).Round(time.Millisecond))
	}
}

// requireExitReport reads the node agent's report of pod's worker exit and fails the test
// unless it is of that attempt and exit code, from the pod's node.
// sigtermRestartsInPlace SIGTERMs victim's worker (index 1) in attempt 1 through its node's
// containerd and checks what follows: attempt 2 Running, restarted in place with no index
// moved, the verdict an Unknown exit 143 of index 1, which the agent reported for attempt 1.
func sigtermRestartsInPlace(ctx context.Context, t *testing.T, c *cluster.Cluster, node *cluster.RealNode, run string, victim *corev1.Pod) {
	t.Helper()
	killed := time.Now()
	killWorker(ctx, t, c, node, victim, "SIGTERM")
	got := waitRun(ctx, t, c, victim.Namespace, run, "attempt 2 Running", attemptRunningOrOver(2))
	requireRunning(t, got, 2)
	t.Logf("SIGTERM to index 1's worker -> attempt 2 Running in %s", time.Since(killed).Round(time.Millisecond))
	if f := got.Status.LastFailure; f == nil || f.Cause != v1alpha1.CauseUnknown || f.ExitCode == nil || *f.ExitCode != 143 || f.Index == nil || *f.Index != 1 {
		t.Errorf("attempt 1's verdict: %s; want Unknown, index 1's exit 143", describeRun(got))
	}
	if rec := got.Status.Attempts[len(got.Status.Attempts)-1]; rec.RestartMode != v1alpha1.RestartModeInPlace || len(rec.MovedIndexes) != 0 {
		t.Errorf("attempt 2's record: restartMode %q movedIndexes %v; want InPlace, none", rec.RestartMode, rec.MovedIndexes)
	}
	requireExitReport(ctx, t, c, victim, 1, 143)
}

func requireExitReport(ctx context.Context, t *testing.T, c *cluster.Cluster, pod *corev1.Pod, attempt, code int32) v1alpha1.WorkerExit {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ex v1alpha1.WorkerExit
	raw := p.Annotations[v1alpha1.AnnotationWorkerExit]
	if err := json.Unmarshal([]byte(raw), &ex); err != nil {
		t.Fatalf("pod %s: exit report %q: %v", pod.Name, raw, err)
	}
	if ex.Attempt != attempt || ex.ExitCode != code || ex.Container != "worker" || ex.Node != pod.Spec.NodeName || ex.FinishedAt == "" {
		t.Errorf("pod %s: exit report %+v; want attempt %d, the worker's exit %d on %s", pod.Name, ex, attempt, code, pod.Spec.NodeName)
	}
	return ex
}
