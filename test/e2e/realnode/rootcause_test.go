package realnode

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealRootCauseWhenEveryWorkerAborts (issue 39): four real containers replay a real
// JAX 0.11.2 gang whose worker 2 raised a Python exception (the test worker's --replay, the
// recording jax-0.11.2-cpu-worker2-raises of package realoutput, with its original timing):
// the coordination service aborted all four, worker 2 among them, and every one exits 134
// within one second, worker 2 neither first nor alone in its exit code. Only what they
// printed tells the root: the survivors name task 2, the one that reached the shutdown
// barrier alone, and worker 2's own output names itself. The verdict names index 2,
// Application, AppExit; the run fails without a restart.
//
// Once restarting in place (the node agents' reports carry the exits, to the nanosecond,
// and the lines above the kubelet's tail) and once recreating (the pods' statuses keep the
// exits and the kubelet's tail, the agents' reports beside them).
func TestRealRootCauseWhenEveryWorkerAborts(t *testing.T) {
	t.Parallel()
	const recording = "jax-0.11.2-cpu-worker2-raises"
	for name, mode := range map[string]v1alpha1.RestartMode{
		"in place": v1alpha1.RestartModeInPlace,
		"recreate": v1alpha1.RestartModeRecreate,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, c, ns := scenario(t, 4*time.Minute)
			startController(t, c, ns)

			run := createRun(ctx, t, c, ns, realRun("aborts", 4, []string{"--replay", recording}, withRestartMode(mode)))
			workers := createdWorkers(ctx, t, c, ns, run.Name, 1, 4)
			// Held until read: a worker whose exit its kubelet has not reported when the run
			// fails is stopped with the run (removePods), and its pod can be gone before the
			// exit is read below (CI of session 29).
			for i := range 4 {
				holdPod(ctx, t, c, workers[i])
			}
			got := waitRun(ctx, t, c, ns, run.Name, "Failed", failedOrRestarted)

			f := got.Status.LastFailure
			if f == nil || f.Class != v1alpha1.ClassApplication || f.Cause != v1alpha1.CauseAppExit || f.Pod != workers[2].Name {
				t.Fatalf("verdict: %s; want Application/AppExit on %s (index 2)", describeRun(got), workers[2].Name)
			}
			if f.ExitCode == nil || *f.ExitCode != 134 {
				t.Errorf("verdict exit %s, want 134 (the coordination service's abort)", ptrOr(f.ExitCode))
			}
			if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "names index 2 (pod "+workers[2].Name+") as the worker that failed") {
				t.Errorf("evidence %q: want the survivors naming index 2", ev)
			}
			if got.Status.Attempt != 1 || got.Status.Restarts != (v1alpha1.RestartCounts{}) {
				t.Errorf("attempt %d restarts %+v: an application bug restarts nothing", got.Status.Attempt, got.Status.Restarts)
			}

			// The premise: every worker exited 134, all within one second, as the recording did.
			var first, last time.Time
			for i := range 4 {
				p, err := c.Client.CoreV1().Pods(ns).Get(ctx, workers[i].Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				code, at := workerExit(p)
				if code != 134 {
					t.Errorf("index %d exited %d, want 134 (replayed)", i, code)
				}
				if first.IsZero() || at.Before(first) {
					first = at
				}
				if at.After(last) {
					last = at
				}
			}
			if last.Sub(first) >= time.Second {
				t.Errorf("the workers exited from %s to %s: want every one within a second", first.Format(time.StampMilli), last.Format(time.StampMilli))
			}
		})
	}
}

// workerExit is the worker's exit code and time: the node agent's report of attempt 1's exit
// (to the nanosecond, and the only record for a pod that restarts in place), else the pod's
// status (to the second).
func workerExit(p *corev1.Pod) (int32, time.Time) {
	if ex, ok := attempt.ReportedExit(p); ok && ex.Attempt == 1 {
		term := ex.Terminated()
		return term.ExitCode, term.FinishedAt.Time
	}
	if term := cluster.WorkerTerminated(p); term != nil {
		return term.ExitCode, term.FinishedAt.Time
	}
	return 0, time.Time{}
}
