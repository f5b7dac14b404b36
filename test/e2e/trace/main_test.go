// Package trace runs the scenario in which the node agent and the controller both export
// spans: one fault episode, from the logind signal on a node to the next attempt Running,
// must arrive at an OTLP receiver as one whole trace. It has a cluster of its own, with the
// TrainingRun CRD and the agent's DaemonSet, since a shutdown marks every run pod of its
// node.
package trace

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/test/cluster"
)

const (
	agentNamespace = "faultline-system"
	nodes          = 1
)

var (
	agentBin, launcherBin string
	// dsPods are the agent DaemonSet's pods by node: their tokens carry the node's name.
	dsPods = map[string]*corev1.Pod{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-trace-e2e-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if agentBin, err = cluster.BuildBinary(binDir, "./cmd/nodeagent", ""); err == nil {
			launcherBin, err = cluster.BuildBinary(binDir, "./cmd/launcher", "")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, cluster.Options{Name: "trace", Nodes: nodes, Setup: setup})
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// setup installs the CRD for the controller, the admission policies and the agent's DaemonSet (kwok runs its pods;
// the test runs the agent process, with the token of the pod on its node).
func setup(ctx context.Context, c *cluster.Cluster) error {
	if err := c.InstallCRDs(ctx, filepath.Join(c.Tools.Root, "deploy", "crd")); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, dir := range []string{"admission", "daemonset"} {
		if err := c.ApplyKustomization(ctx, filepath.Join(c.Tools.Root, "deploy", dir)); err != nil {
			return err
		}
	}
	sel := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "faultline-nodeagent"})
	pods, err := c.WaitPods(ctx, agentNamespace, sel, func(pods []*corev1.Pod) (bool, error) {
		running := 0
		for _, p := range pods {
			if cluster.PodRunning(p) {
				running++
			}
		}
		return running == nodes, nil
	})
	if err != nil {
		return fmt.Errorf("agent DaemonSet pods: %w", err)
	}
	for _, p := range pods {
		dsPods[p.Spec.NodeName] = p
	}
	return nil
}
