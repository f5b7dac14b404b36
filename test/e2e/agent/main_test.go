// Package agent runs the node agent's end-to-end scenarios: one nodeagent process per fake
// node, each with a system bus of its own (a real dbus-daemon with login1sim's logind) and
// simulated GPUs, authenticated with a token bound to its DaemonSet pod, against a real
// control plane with the agent's RBAC and ValidatingAdmissionPolicy applied. It has a
// cluster of its own: a shutdown marks every run pod on a node, which must not reach the
// controller scenarios' pods.
package agent

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/faultline-dev/faultline/test/cluster"
)

// nodes: 0–4 for the tests, 5–7 for the benchmarks alone (a test's pods may still hold a
// node's simulated GPUs when a benchmark starts).
const nodes = 9

// Nodes of the benchmarks.
var (
	xidBenchNode      = cluster.NodeName(5)
	shutdownBenchNode = cluster.NodeName(6)
	floorBenchNode    = cluster.NodeName(7)
)

var (
	agentBin string
	// dsPods are the DaemonSet's pods by node: their tokens carry the node's name.
	dsPods = map[string]*corev1.Pod{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	var binDir string
	if !testing.Short() {
		var err error
		if binDir, err = os.MkdirTemp("", "faultline-agent-e2e-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if agentBin, err = cluster.BuildBinary(binDir, "./cmd/nodeagent", ""); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	opts := cluster.Options{Name: "agent", Nodes: nodes, Setup: installAgent}
	if binDir != "" {
		// What the agents read, for TestE2EAgentSeesOnlyItsNode: the API server's own record.
		opts.AuditPolicy = filepath.Join(binDir, "audit-policy.yaml")
		if err := os.WriteFile(opts.AuditPolicy, []byte(agentReadsAudit), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(binDir)
			os.Exit(1)
		}
	}
	code := cluster.Main(m, opts)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// agentReadsAudit is the API server's audit policy: the node agents' reads of pods and
// TrainingRuns (their metadata: who, what, which selector), nothing else.
const agentReadsAudit = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:faultline-system:faultline-nodeagent"]
  verbs: ["get", "list", "watch"]
  resources:
  - group: ""
    resources: ["pods"]
  - group: faultline.dev
    resources: ["trainingruns"]
- level: None
`

// installAgent applies deploy/daemonset as an operator would and waits for one agent pod
// per node (kwok runs them; the test runs the agent processes themselves).
func installAgent(ctx context.Context, c *cluster.Cluster) error {
	pods, err := c.InstallAgentDaemonSet(ctx, nodes)
	if err != nil {
		return err
	}
	dsPods = pods
	return waitPolicyEnforced(ctx, c)
}

// waitPolicyEnforced returns once the API server enforces the agent's admission policy: a
// policy takes effect some time after it is created, and nothing can be watched for that.
// The probe is a dry run, so it changes nothing even when it is let through.
func waitPolicyEnforced(ctx context.Context, c *cluster.Cluster) error {
	dir, err := os.MkdirTemp("", "faultline-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, token, err := c.PodBoundKubeconfig(ctx, dsPods[cluster.NodeName(0)], dir)
	if err != nil {
		return err
	}
	asAgent, err := kubernetes.NewForConfig(token)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"faultline.dev/probe":"x"}}}`)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, cluster.NodeName(1), types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
}
