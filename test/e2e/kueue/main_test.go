// Package kueue runs faultline's Kueue integration against a real Kueue (v0.19, built from
// its Go module by hack/build-tools.sh) beside one shared local control plane with kwok
// nodes: admission, quota, restarts inside one admission, preemption and flavors. Kueue
// acts on Workloads, quotas and pod templates, never on kubelets, so simulated nodes show all
// of it. Each scenario runs its own controller in its own namespace, with a ClusterQueue,
// LocalQueue and ResourceFlavor of its own.
package kueue

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// launcherBin is the launcher that TestMain builds once for the package.
var launcherBin string

// baselineEnv names a launcher built without the Kueue integration (e.g. from the commit
// before it): the scenarios then run its controller, without --kueue, against the same Kueue,
// and every one of them must fail. It is how the scenarios were seen to fail without the
// change: FAULTLINE_KUEUE_E2E_BASELINE=/path/to/old/launcher go test ./test/e2e/kueue/
const baselineEnv = "FAULTLINE_KUEUE_E2E_BASELINE"

// baseline is that launcher's path, when set.
var baseline string

// The package's Kueue runs WaitForPodsReady with a recovery timeout far below a held
// restart's length, so that a restart Kueue took for a recovery would be evicted within the
// scenario; the start timeout stays long enough for a loaded machine's first start.
const (
	podsReadyTimeout         = 2 * time.Minute
	podsReadyRecoveryTimeout = 3 * time.Second
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir, kueueDir string
	var kq *cluster.Kueue
	if !testing.Short() {
		var err error
		if baseline = os.Getenv(baselineEnv); baseline != "" {
			launcherBin = baseline
		} else if binDir, err = os.MkdirTemp("", "faultline-kueue-bin-"); err == nil {
			launcherBin, err = cluster.BuildLauncher(binDir)
		}
		if err == nil {
			kueueDir, err = os.MkdirTemp("", "faultline-kueue-")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{
		Name: "kueue",
		// Two gangs of a few one-GPU workers per scenario, five scenarios side by side.
		Nodes: 5,
		Setup: func(ctx context.Context, c *cluster.Cluster) error {
			if err := c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd")); err != nil {
				return err
			}
			if err := installQueuePolicy(ctx, c); err != nil {
				return err
			}
			var err error
			kq, err = c.StartKueue(ctx, kueueDir, cluster.KueueOptions{
				ExternalFrameworks:       []string{v1alpha1.KueueExternalFramework},
				PodsReadyTimeout:         podsReadyTimeout,
				PodsReadyRecoveryTimeout: podsReadyRecoveryTimeout,
			})
			return err
		},
	})
	if kq != nil {
		// What Kueue made of the attempts' Jobs (docs/kueue.md): its reconcile errors.
		fmt.Fprintf(os.Stderr, "kueue.log: %d reconcile errors, %d of them the missing owner index for external frameworks\n",
			countLines(kq.LogPath, `"msg":"Reconciler error"`), countLines(kq.LogPath, `"msg":"Reconciler error"`, "ownerReferences[faultline.dev.TrainingRun] does not exist"))
		if code != 0 {
			fmt.Fprintf(os.Stderr, "kueue.log (last 60 lines of %s):\n%s\n", kq.LogPath, kq.Tail(60))
		}
		kq.Stop()
	}
	os.RemoveAll(binDir)
	os.RemoveAll(kueueDir)
	os.Exit(code)
}

// countLines counts the lines of a file that hold every one of subs.
func countLines(path string, subs ...string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			n++
		}
	}
	return n
}

// noQueuePolicyLabel marks a namespace that the faultline-queue policy's binding leaves out
// here, as a cluster without the policy would: there, the controller's own check holds.
const noQueuePolicyLabel = "kueue-test.faultline.dev/no-queue-policy"

// installQueuePolicy applies the faultline-queue policy as an operator would
// (deploy/admission/queue.yaml), binds it everywhere but the namespaces labelled
// noQueuePolicyLabel, and waits until the API server enforces it: a policy takes effect some
// time after it is created, and nothing can be watched for that. The probe is a queued run
// of its own, whose label removal (a dry run) must be refused.
func installQueuePolicy(ctx context.Context, c *cluster.Cluster) error {
	path := filepath.Join(c.Tools.Root, "deploy", "admission", "queue.yaml")
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", path); err != nil {
		return err
	}
	patch := `{"spec":{"matchResources":{"namespaceSelector":{"matchExpressions":[{"key":"` + noQueuePolicyLabel + `","operator":"DoesNotExist"}]}}}}`
	if _, err := c.Kubectl(ctx, "patch", "validatingadmissionpolicybinding", v1alpha1.QueuePolicyName, "--type=merge", "-p", patch); err != nil {
		return err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: testScheme})
	if err != nil {
		return err
	}
	const ns = "queue-policy-probe"
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{v1alpha1.LabelQueueName: "lq"}},
		Spec: v1alpha1.TrainingRunSpec{Workers: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "worker", Image: "probe"}},
		}}},
	}
	if err := cl.Create(ctx, run); err != nil {
		return err
	}
	// No controller serves the namespace: the probe writes the queued status itself.
	run.Status.Queue = &v1alpha1.QueueStatus{Name: "lq", Workload: "probe"}
	if err := cl.Status().Update(ctx, run); err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		unlabelled := run.DeepCopy()
		delete(unlabelled.Labels, v1alpha1.LabelQueueName)
		last = cl.Update(ctx, unlabelled, client.DryRunAll)
		return apierrors.IsForbidden(last), nil
	})
	if err != nil {
		return fmt.Errorf("the %s policy never refused the removal of a queued run's queue label: %w (last answer: %v)", v1alpha1.QueuePolicyName, err, last)
	}
	return nil
}
