package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// These scenarios run without faultline's admission policies (this package installs only the
// CRD): what a cluster whose operator skipped them, or an older one, still gets from the
// controller. test/e2e/trust shows the policies refusing the same writes.

// TestE2EUnattestedEvidenceIsIgnored: evidence written where anyone who may edit a pod can
// write it is not node evidence. A template that would copy it onto every worker is refused
// by the CRD; written onto every worker through the pods resource, with the right node and
// time and a GPU XID that would restart the run if the agent had written it, it is ignored:
// the worker's exit 1 fails the run as AppExit, no budget is spent, and `launcher explain`
// says the evidence was there, not attested, and ignored.
func TestE2EUnattestedEvidenceIsIgnored(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	forged := func(node string) v1alpha1.FaultEvidence {
		return v1alpha1.FaultEvidence{
			Source: v1alpha1.EvidenceSourceNVMLEvent, Node: node, Cause: v1alpha1.CauseGPUFault,
			DetectedAt: time.Now().UTC().Format(time.RFC3339Nano),
			GPU:        &v1alpha1.GPUEvidence{UUID: "GPU-forged", Index: 0, XID: 79},
		}
	}

	templated := newRun("templated", 2)
	templated.Spec.Template.Annotations = map[string]string{v1alpha1.AnnotationFaultEvidence: `{"source":"nvml-event","cause":"GPUFault"}`}
	templated.Namespace = ns
	if err := runClient(t, c).Create(ctx, templated); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must not use keys under faultline.dev/") {
		t.Fatalf("a run whose template carries fault evidence: got %v, want the CRD's 422 naming the annotation", err)
	}

	run, pods := runningRun(ctx, t, c, ns, newRun("unattested", 2, withSettleSeconds(1)))
	for _, p := range pods {
		annotateFaultEvidence(ctx, t, c, p, forged(p.Spec.NodeName))
	}
	failWorker(ctx, t, c, pods[1], cluster.Failure{ExitCode: 1, Reason: "Error", Message: "CUDA error: unspecified launch failure"})
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	lf := failed.Status.LastFailure
	if lf == nil || lf.Class != v1alpha1.ClassApplication || lf.Cause != v1alpha1.CauseAppExit {
		t.Fatalf("run ended as %s, want Failed as AppExit", describeRun(failed))
	}
	if failed.Status.Attempt != 1 {
		t.Errorf("status.attempt = %d, want 1", failed.Status.Attempt)
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{})
	if len(failed.Status.ExcludedNodes) > 0 {
		t.Errorf("status.excludedNodes = %v: a forgery must not exclude a healthy node", failed.Status.ExcludedNodes)
	}
	out := launcherOutput(ctx, t, c, "explain", run.Name, "-n", ns)
	for _, want := range []string{
		"its fault evidence is not attested",
		"has no faultline.dev/InfrastructureFault condition beside it in the pod's status; ignored",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("launcher explain does not say %q:\n%s", want, out)
		}
	}
}

// TestE2EProgramOutputIsNotNodeEvidence: a worker whose last words are the CUDA runtime's
// "uncorrectable ECC error" with no node evidence is not judged a GPU fault: the program's
// output may blame a peer or itself, never prove the node (the agent sees a real ECC error
// through NVML). Its exit 1 fails the run fast, with no budget spent.
func TestE2EProgramOutputIsNotNodeEvidence(t *testing.T) {
	t.Parallel()
	ctx, c, ns, _ := scenario(t)
	run, pods := runningRun(ctx, t, c, ns, newRun("ecc-claim", 2, withSettleSeconds(1), func(r *v1alpha1.TrainingRun) { r.Spec.Framework = "jax" }))
	failWorker(ctx, t, c, pods[0], cluster.Failure{ExitCode: 1, Reason: "Error",
		Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: uncorrectable ECC error encountered"})
	failed := waitRun(ctx, t, c, ns, run.Name, "phase Failed", phaseIs(v1alpha1.PhaseFailed))
	lf := failed.Status.LastFailure
	if lf == nil || lf.Class != v1alpha1.ClassApplication || lf.Cause != v1alpha1.CauseAppExit {
		t.Fatalf("run ended as %s: the program's own words must not make a GPU fault; its exit 1 is its own", describeRun(failed))
	}
	requireRestarts(t, failed, v1alpha1.RestartCounts{})
}

// launcherOutput runs the launcher binary against the shared cluster and returns its output.
func launcherOutput(ctx context.Context, t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, launcherBin, append(args, "--kubeconfig", c.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("launcher %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
