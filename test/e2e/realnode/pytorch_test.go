package realnode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestRealPyTorchGangFromItsEnv: a run with framework pytorch on the real nodes. The test
// worker forms its gang from the env the pytorch plugin gave it, as a program started with
// torchrun's or env://'s variables would: rank 0 serves on MASTER_ADDR:MASTER_PORT (the
// plugin's 29500, by the pod's DNS name through the real CoreDNS), every pod registers its
// RANK there, and the master sees WORLD_SIZE ranks, each once.
func TestRealPyTorchGangFromItsEnv(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)

	const workers = 3
	run := createRun(ctx, t, c, ns, realRun("torch", workers, nil, func(r *v1alpha1.TrainingRun) { r.Spec.Framework = "pytorch" }))
	waitRun(ctx, t, c, ns, run.Name, "attempt 1 Running", runningAttempt(1))
	waitWorkers(ctx, t, c, ns, run.Name, 1, workers)
	if log, ranks := registeredTasks(ctx, t, c, ns, run.Name, 1, workers); strings.Join(ranks, ",") != eachOnce(workers) {
		t.Errorf("rank 0 registered %v, want each of 0-2 once:\n%s", ranks, log)
	}
	master := fmt.Sprintf("coordinator=%s-0.%s.%s.svc:29500", run.Name, run.Name, ns)
	for i := range workers {
		if l := workerLog(ctx, t, c, ns, run.Name, 1, i); !strings.Contains(l, master) || !strings.Contains(l, fmt.Sprintf("index=%d world=%d", i, workers)) {
			t.Errorf("worker %d did not start from the pytorch env (want %s, index=%d world=%d):\n%s", i, master, i, workers, l)
		}
	}
}
