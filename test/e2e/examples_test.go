package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/faultline-dev/faultline/examples"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EExamplesRun: every example of examples/ that needs nothing but faultline, applied
// as a user would (`kubectl apply -f examples/<file>`, the pinned kubectl, client-side, into
// the user's namespace), reaches Running: every worker of attempt 1 Running, one pod per
// index, under a controller with the shipped plugins. The examples that name a Kueue queue
// run in test/e2e/kueue's TestE2EExamplesRun, against a real Kueue.
//
// The test is not parallel with the package's other scenarios: its runs ask for 14 GPUs
// together, which the cluster holds beside no other scenario's; its examples run side by
// side.
func TestE2EExamplesRun(t *testing.T) {
	all, err := examples.All()
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, ex := range all {
		if ex.Queue() != "" {
			continue
		}
		ran++
		t.Run(ex.File, func(t *testing.T) {
			t.Parallel()
			ctx, c, ns, _ := scenario(t)
			kubectlApply(t, c, ns, filepath.Join(c.Tools.Root, "examples", ex.File))
			waitRun(ctx, t, c, ns, ex.Run.Name, "attempt 1 Running", runningAttempt(1))
			waitWorkers(ctx, t, c, ns, ex.Run.Name, 1, int(ex.Run.Spec.Workers))
		})
	}
	if ran == 0 {
		t.Fatal("no example to run in examples/")
	}
}

// kubectlApply runs `kubectl apply -f path` in namespace ns, as a user would.
func kubectlApply(t *testing.T, c *cluster.Cluster, ns, path string) {
	t.Helper()
	out, err := c.Kubectl(context.Background(), "--namespace", ns, "apply", "-f", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -f %s: %s", path, out)
}
