package kueue

import (
	"path/filepath"
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/examples"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// TestE2EExamplesRun: every example of examples/ that names a Kueue queue, applied as a user
// would (`kubectl apply -f`, the pinned kubectl, into the user's namespace) where a LocalQueue
// of that name has quota for it, is admitted by Kueue and reaches Running: every worker of
// attempt 1 Running, with the run's Workload admitted by the scenario's ClusterQueue. The
// other examples run in test/e2e's TestE2EExamplesRun.
func TestE2EExamplesRun(t *testing.T) {
	t.Parallel()
	all, err := examples.All()
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, ex := range all {
		if ex.Queue() == "" {
			continue
		}
		ran++
		t.Run(ex.File, func(t *testing.T) {
			t.Parallel()
			run := ex.Run
			e := scenario(t, queueSpec{gpus: int(run.Spec.Workers) * int(gpusOf(run))})
			// The example's own queue, beside the scenario's, in front of the same ClusterQueue.
			e.create(kueue.LocalQueueGVK, e.ns, ex.Queue(), map[string]any{"clusterQueue": e.cq})
			path := filepath.Join(e.c.Tools.Root, "examples", ex.File)
			if _, err := e.c.Kubectl(e.ctx, "--namespace", e.ns, "apply", "-f", path); err != nil {
				t.Fatal(err)
			}
			running := e.waitRun(run.Name, "attempt 1 Running", runningAttempt(1))
			e.waitWorkers(run.Name, 1, int(run.Spec.Workers))
			if q := running.Status.Queue; q == nil || q.ClusterQueue != e.cq || q.AdmittedAt == nil {
				t.Errorf("status.queue = %+v, want admitted by ClusterQueue %s", q, e.cq)
			}
		})
	}
	if ran == 0 {
		t.Fatal("no example in examples/ names a Kueue queue")
	}
}

// gpusOf is what one worker of the run asks for.
func gpusOf(run *v1alpha1.TrainingRun) int64 {
	var n int64
	for _, c := range run.Spec.Template.Spec.Containers {
		q := c.Resources.Limits[v1alpha1.ResourceGPU]
		n += q.Value()
	}
	return n
}
