// Package trust runs the scenarios of who may write what: a tenant with the edit role, the
// node agent's token, the controller's service account. Its cluster has faultline installed
// as an operator installs it (`kubectl apply --server-side -k deploy/`: the CRD and its user
// roles, the admission policies, the controller's and the agent's RBAC; kwok runs the
// Deployment's and the DaemonSet's pods), and every request below is made with the token of
// the identity it stands for, never the admin's client certificate.
package trust

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// nodes: one kwok node per DaemonSet pod whose token a test uses.
const nodes = 3

var (
	launcherBin string
	// dsPods are the agent DaemonSet's pods by node: their tokens carry the node's name.
	dsPods map[string]*corev1.Pod
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-trust-bin-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if launcherBin, err = cluster.BuildLauncher(binDir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{Name: "trust", Nodes: nodes, Setup: install})
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// install applies deploy/ whole, as the README tells an operator to, and waits until the
// agent's DaemonSet pods run and the admission policies are enforced.
func install(ctx context.Context, c *cluster.Cluster) error {
	// The CRD first, Established, so that the kustomization's other objects never race it.
	if err := c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd")); err != nil {
		return err
	}
	if err := c.ApplyKustomization(ctx, filepath.Join(c.Tools.Root, "deploy")); err != nil {
		return err
	}
	var err error
	if dsPods, err = c.AgentPods(ctx, nodes); err != nil {
		return err
	}
	return waitEnforced(ctx, c)
}

// waitEnforced returns once the API server enforces the evidence policy: a policy takes
// effect some time after it is created, and nothing can be watched for that. The probe is a
// dry run of what the policy refuses even to the admin (a worker made with evidence), so it
// stores nothing.
func waitEnforced(ctx context.Context, c *cluster.Cluster) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "evidence-probe", Namespace: metav1.NamespaceDefault,
			Labels:      map[string]string{v1alpha1.LabelRun: "probe"},
			Annotations: map[string]string{v1alpha1.AnnotationFaultEvidence: "{}"},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(probe.Namespace).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
}
