package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestCLISubmitWatchSucceeds: submit -f creates the run; watch follows it to Succeeded and
// exits 0; get and describe show the finished run.
func TestCLISubmitWatchSucceeds(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t)
	file := writeFile(t, "run.yaml", manifest("ok", 3, ""))
	r := launcher(ctx, t, c, ns, "submit", "-f", file)
	requireOutput(t, r, 0, "stdout", "trainingrun.faultline.dev/ok created")

	watch := startLauncher(t, c, ns, "watch", "ok")
	pods := workers(ctx, t, c, ns, "ok", 1, 3)
	waitPhase(ctx, t, c, ns, "ok", v1alpha1.PhaseRunning) // so that the watch sees it Running
	for _, p := range pods {
		if err := c.CompletePod(ctx, ns, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	requireOutput(t, watch.wait(ctx, t), 0, "stdout", "watching trainingrun ok", "Running", "trainingrun ok Succeeded in attempt 1")

	requireOutput(t, launcher(ctx, t, c, ns, "get"), 0, "stdout", "NAME", "ok", "Succeeded", "0/3")
	requireOutput(t, launcher(ctx, t, c, ns, "get", "ok", "-o", "yaml"), 0, "stdout", "kind: TrainingRun", "phase: Succeeded")
	requireOutput(t, launcher(ctx, t, c, "", "get", "-A"), 0, "stdout", "NAMESPACE", ns)
	requireOutput(t, launcher(ctx, t, c, ns, "describe", "ok"), 0, "stdout",
		"Framework:        jax", "Attempt 1: Succeeded", "AttemptCreated", "JobCompleted")
}

// TestCLIWatchFailsOnAppError: an exit 1 fails the run; watch exits 1 with the verdict;
// explain names the cause for the run and for the pod; timeline draws it (also as HTML);
// logs on a kwok node says why there are none.
func TestCLIWatchFailsOnAppError(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t)
	r := launcher(ctx, t, c, ns, "run", "--name", "bad", "--framework", "jax", "--workers", "2", "--gpus-per-worker", "1",
		"--image", "ghcr.io/example/jax-train:1.0", "--max-infra-restarts", "3", "--", "python", "train.py")
	requireOutput(t, r, 0, "stdout", "trainingrun.faultline.dev/bad created")
	watch := startLauncher(t, c, ns, "watch", "bad")
	pods := workers(ctx, t, c, ns, "bad", 1, 2)
	victim := pods[0]
	if victim.Annotations[batchv1.JobCompletionIndexAnnotation] != "1" {
		victim = pods[1]
	}
	if err := c.FailPod(ctx, ns, victim.Name, cluster.Failure{ExitCode: 1, Message: "ValueError: loss is NaN"}); err != nil {
		t.Fatal(err)
	}
	requireOutput(t, watch.wait(ctx, t), 1, "stdout", "trainingrun bad Failed in attempt 1",
		"cause:    AppExit (application) at index 1", "launcher explain bad")

	requireOutput(t, launcher(ctx, t, c, ns, "explain", "bad"), 0, "stdout",
		"Attempt 1 ended: AppExit (application) at index 1 (pod "+victim.Name+")", "exit 1",
		"Decision: rule default-application → FailRun", "What to do", "launcher logs bad --attempt 1 --index 1")
	requireOutput(t, launcher(ctx, t, c, ns, "explain", "pod/"+victim.Name), 0, "stdout",
		"Verdict on attempt 1: AppExit (application)", "This pod is the root cause")
	requireOutput(t, launcher(ctx, t, c, ns, "get", "bad", "-o", "wide"), 0, "stdout", "Failed", "AppExit", victim.Name)
	requireOutput(t, launcher(ctx, t, c, ns, "timeline", "bad"), 0, "stdout", "attempt 1", "✗", "Failed: AppExit")

	html := filepath.Join(t.TempDir(), "bad.html")
	requireOutput(t, launcher(ctx, t, c, ns, "timeline", "bad", "--html", html), 0, "stdout", "written to "+html)
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "attempt 1", "AppExit"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("HTML timeline lacks %q", want)
		}
	}
	for _, external := range []string{"src=", "href=", "@import", "url("} {
		if strings.Contains(string(page), external) {
			t.Errorf("HTML timeline refers to an external asset (%q): it must stand alone", external)
		}
	}
	requireOutput(t, launcher(ctx, t, c, ns, "logs", "bad", "--attempt", "1", "--index", "1"), 2, "stderr",
		"simulated (kwok)", "no logs")
}

// TestCLIInvalidSpecShowsTheField: the API server's 422 reaches the user with the field
// and its message, and exit code 2; so does a misspelled field (strict validation).
func TestCLIInvalidSpecShowsTheField(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	bad := strings.Replace(manifest("zero", 1, ""), "workers: 1", "workers: 0", 1)
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "zero.yaml", bad)), 2, "stderr",
		`the API server rejected trainingrun "zero"`, "spec.workers", "greater than or equal to 1")

	never := strings.Replace(manifest("onfailure", 1, ""), "      containers:", "      restartPolicy: OnFailure\n      containers:", 1)
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "rp.yaml", never)), 2, "stderr",
		"spec.template.spec.restartPolicy", "must be Never")

	typo := manifest("typo", 1, "  wokers: 2\n")
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "typo.yaml", typo)), 2, "stderr", "unknown field", "wokers")

	requireOutput(t, launcher(ctx, t, c, ns, "run", "--name", "x", "--image", "i", "--workers", "0"), 2, "stderr", "spec.workers")
	requireOutput(t, launcher(ctx, t, c, ns, "run", "--image", "i"), 2, "stderr", "--name is required")
}

// TestCLIUnknownRun: every command that takes a run says which run is missing where.
func TestCLIUnknownRun(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	want := "error: trainingrun nope not found in namespace " + ns
	for _, args := range [][]string{{"get", "nope"}, {"describe", "nope"}, {"watch", "nope"}, {"timeline", "nope"},
		{"logs", "nope"}, {"delete", "nope"}, {"suspend", "nope"}, {"explain", "trainingrun/nope"}} {
		requireOutput(t, launcher(ctx, t, c, ns, args...), 2, "stderr", want)
	}
	requireOutput(t, launcher(ctx, t, c, ns, "explain", "nope"), 2, "stderr", "no trainingrun or pod named nope in namespace "+ns)
	requireOutput(t, launcher(ctx, t, c, ns, "get"), 0, "stderr", "No trainingruns found in namespace "+ns)
}

// TestCLIUnreachableCluster: no API server → say so, and how to start the local one.
func TestCLIUnreachableCluster(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t) // for the binary; the command goes elsewhere
	r := launcher(t.Context(), t, c, "", "--server", "https://127.0.0.1:1", "get")
	requireOutput(t, r, 2, "stderr", "cannot reach the Kubernetes API server at https://127.0.0.1:1", "make cluster-up")
}

// TestCLIControllerRefusesANonPositiveRateLimit: client-go would read a QPS of 0 as its own
// default (5 a second) and a negative one as no limit at all; the controller says so instead.
func TestCLIControllerRefusesANonPositiveRateLimit(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t) // for the binary; the controller stops before it reaches the cluster
	// A controller that took the flags would run until killed: the deadline turns that into a failure.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, args := range [][]string{{"--kube-api-qps", "0"}, {"--kube-api-qps", "-1"}, {"--kube-api-burst", "0"}} {
		r := launcher(ctx, t, c, "", append([]string{"controller", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, args...)...)
		requireOutput(t, r, 2, "stderr", "--kube-api-qps", "--kube-api-burst", "must be positive")
	}
}

// TestCLISuspendResumeDelete: suspend stops the workers without counting a failure, resume
// starts a fresh attempt, delete removes the run.
func TestCLISuspendResumeDelete(t *testing.T) {
	t.Parallel()
	ctx, c, ns := scenario(t)
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "r.yaml", manifest("pausable", 2, ""))), 0, "stdout", "created")
	workers(ctx, t, c, ns, "pausable", 1, 2)
	requireOutput(t, launcher(ctx, t, c, ns, "suspend", "pausable"), 0, "stdout", "trainingrun.faultline.dev/pausable suspended")
	waitPhase(ctx, t, c, ns, "pausable", v1alpha1.PhaseSuspended)
	requireOutput(t, launcher(ctx, t, c, ns, "resume", "pausable"), 0, "stdout", "trainingrun.faultline.dev/pausable resumed")
	workers(ctx, t, c, ns, "pausable", 2, 2)
	requireOutput(t, launcher(ctx, t, c, ns, "get", "pausable"), 0, "stdout", "pausable", "2 ", "0 ")
	requireOutput(t, launcher(ctx, t, c, ns, "delete", "pausable"), 0, "stdout", "trainingrun.faultline.dev/pausable deleted")
	requireOutput(t, launcher(ctx, t, c, ns, "get", "pausable"), 2, "stderr", "not found")
}

// TestCLIInstallPrint: install --print writes every manifest, the CRD first.
func TestCLIInstallPrint(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	r := launcher(t.Context(), t, c, "", "install", "--print")
	requireOutput(t, r, 0, "stdout", "kind: CustomResourceDefinition", "kind: Deployment", "kind: DaemonSet", "kind: ValidatingAdmissionPolicy")
	if i, j := strings.Index(r.stdout, "kind: CustomResourceDefinition"), strings.Index(r.stdout, "kind: Deployment"); i > j {
		t.Errorf("the CRD comes after the Deployment in install --print")
	}
}

// waitPhase watches the run until it is in phase.
func waitPhase(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string, phase v1alpha1.Phase) {
	t.Helper()
	runs, err := cli.NewRuns(c.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	_, err = watchtools.UntilWithSync(ctx, runs.ListWatch(name), &v1alpha1.TrainingRun{}, nil, func(e watch.Event) (bool, error) {
		r, ok := e.Object.(*v1alpha1.TrainingRun)
		return ok && r.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("trainingrun %s never %s: %v", name, phase, err)
	}
}
