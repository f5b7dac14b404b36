package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// shardLabel labels a test's NodeMaintenances with its namespace: its controller acts only
// on those (--node-maintenance-selector), so that parallel tests never drain for each other.
const shardLabel = "test.faultline.dev/ns"

// drainScenario is scenario with a controller that also acts on the test's own
// NodeMaintenances, and two nodes of the test's own (a taint only its runs tolerate, a label
// they select).
func drainScenario(t *testing.T) (context.Context, *cluster.Cluster, string, []string) {
	t.Helper()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	cluster.StartProcess(t, launcherBin, "controller", "--kubeconfig", c.Kubeconfig, "--namespace", ns,
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--node-maintenance-selector", shardLabel+"="+ns)
	pool := "pool-" + ns
	taint := corev1.Taint{Key: "test.faultline.dev/dedicated", Value: pool, Effect: corev1.TaintEffectNoSchedule}
	var nodes []string
	for i := range 2 {
		name := fmt.Sprintf("%s-%d", pool, i)
		if err := c.AddNode(ctx, name, cluster.DefaultNode, taint); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		patch := fmt.Sprintf(`{"metadata":{"labels":{"test.faultline.dev/pool":%q}}}`, pool)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, name)
	}
	return ctx, c, ns, nodes
}

// poolRun is a run of n one-GPU workers on the test's pool, preferring its first node.
func poolRun(name, ns string, workers int, nodes []string) string {
	return fmt.Sprintf(`apiVersion: faultline.dev/v1alpha1
kind: TrainingRun
metadata:
  name: %s
spec:
  framework: jax
  workers: %d
  template:
    spec:
      nodeSelector: {test.faultline.dev/pool: pool-%s}
      tolerations:
      - {key: test.faultline.dev/dedicated, operator: Equal, value: pool-%s, effect: NoSchedule}
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions:
              - {key: kubernetes.io/hostname, operator: In, values: [%s]}
      containers:
      - name: worker
        image: ghcr.io/example/jax-train:1.0
        command: [python, train.py]
        resources:
          limits: {nvidia.com/gpu: 1}
`, name, workers, ns, ns, nodes[0])
}

// nodesJSON runs `launcher nodes -o json` on the test's pool.
func nodesJSON(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) map[string]cli.NodeReport {
	t.Helper()
	r := launcher(ctx, t, c, ns, "nodes", "-l", "test.faultline.dev/pool=pool-"+ns, "-o", "json")
	requireOutput(t, r, 0, "stdout")
	var list cli.NodeList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("launcher nodes -o json: %v; %s", err, r)
	}
	out := map[string]cli.NodeReport{}
	for _, n := range list.Items {
		out[n.Name] = n
	}
	return out
}

// rowOf is the fields of the last table row of run in namespace ns (after a drain --wait,
// the moves' table follows the plan's).
func rowOf(out, ns, run string) []string {
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == ns && f[1] == run {
			row = f
		}
	}
	return row
}

// TestCLIDrainDryRunAndNodes: `launcher nodes` shows the run's workers on its node (attempt,
// indexes, the coordinator); `launcher drain --dry-run` prints the controller's plan and
// cordons nothing; `launcher drain --wait` returns once the run runs off the node, with
// the move and the interruption; `launcher nodes` then shows the node cordoned under the
// NodeMaintenance and the run's next attempt on the other node.
func TestCLIDrainDryRunAndNodes(t *testing.T) {
	t.Parallel()
	ctx, c, ns, nodes := drainScenario(t)
	requireOutput(t, launcher(ctx, t, c, ns, "submit", "-f", writeFile(t, "run.yaml", poolRun("llm", ns, 2, nodes))), 0, "stdout", "trainingrun.faultline.dev/llm created")
	pods := workers(ctx, t, c, ns, "llm", 1, 2)
	for _, p := range pods {
		if p.Spec.NodeName != nodes[0] {
			t.Fatalf("worker %s on %s, want %s", p.Name, p.Spec.NodeName, nodes[0])
		}
	}
	waitPhase(ctx, t, c, ns, "llm", "Running")

	table := launcher(ctx, t, c, ns, "nodes", "-l", "test.faultline.dev/pool=pool-"+ns)
	t.Logf("launcher nodes:\n%s", table.stdout)
	requireOutput(t, table, 0, "stdout", "NAME", "GPUS", "AGENT", "MAINTENANCE", "RUNS", nodes[0], ns+"/llm#1[0,1]*", "8/8")
	got := nodesJSON(ctx, t, c, ns)
	if r := got[nodes[0]].Runs; len(r) != 1 || r[0].Name != "llm" || r[0].Attempt != 1 || !slices.Equal(r[0].Indexes, []int32{0, 1}) || !r[0].Coordinator {
		t.Errorf("nodes: runs on %s = %+v, want llm attempt 1 indexes [0 1] with the coordinator", nodes[0], r)
	}
	if n := got[nodes[1]]; len(n.Runs) != 0 || n.RunsUnknown || n.Cordoned || n.Agent != cli.AgentNone || n.GPUs.Total != 8 {
		t.Errorf("nodes: %s = %+v, want no runs (known), not cordoned, no agent (kwok), 8 GPUs", nodes[1], n)
	}

	label := shardLabel + "=" + ns
	dry := launcher(ctx, t, c, ns, "drain", nodes[0], "--dry-run", "--reason", "firmware FW-"+ns, "--label", label)
	t.Logf("launcher drain --dry-run:\n%s", dry.stdout)
	requireOutput(t, dry, 0, "stdout", "dry run of "+nodes[0], "Planned", "NAMESPACE", "COORDINATOR", "PLACEMENT")
	if row := rowOf(dry.stdout, ns, "llm"); !slices.Equal(row, []string{ns, "llm", "1", "0,1", "yes", "(index", "0)", nodes[0], "moves"}) {
		t.Errorf("dry run: llm's row = %q, want attempt 1, indexes 0,1, the coordinator, %s, moves; %s", row, nodes[0], dry)
	}
	requireOutput(t, dry, 0, "stderr", "nodemaintenance.faultline.dev/dry-run-")
	if got := nodesJSON(ctx, t, c, ns); got[nodes[0]].Cordoned || len(got[nodes[0]].Maintenance) != 0 {
		t.Errorf("after a dry run, %s = %+v, want neither cordoned nor under maintenance", nodes[0], got[nodes[0]])
	}

	bad := launcher(ctx, t, c, ns, "drain", "no-such-node-"+ns, "--label", label)
	requireOutput(t, bad, cli.ExitUsage, "stderr", `node "no-such-node-`+ns+`" not found`, "launcher nodes")
	requireOutput(t, launcher(ctx, t, c, ns, "drain", nodes[0], "--dry-run", "--wait"), cli.ExitUsage, "stderr", "--wait", "--dry-run", "drop one")

	drained := launcher(ctx, t, c, ns, "drain", nodes[0], "--wait", "--reason", "firmware FW-"+ns, "--label", label)
	t.Logf("launcher drain --wait:\n%s%s", drained.stdout, drained.stderr)
	requireOutput(t, drained, 0, "stdout", "drain of "+nodes[0], "Drained at", "FROM-ATTEMPT", "INTERRUPTED")
	// NAMESPACE RUN FROM-ATTEMPT TO-ATTEMPT MOVED-AT (date, time) INTERRUPTED OUTCOME
	if f := rowOf(drained.stdout, ns, "llm"); len(f) != 8 || f[2] != "1" || f[3] != "2" || f[6] == "<none>" || f[7] != "moved" {
		t.Errorf("drain --wait: llm's row = %q, want moved from attempt 1 to 2 with its interruption; %s", f, drained)
	}
	after := nodesJSON(ctx, t, c, ns)
	if n := after[nodes[0]]; !n.Cordoned || len(n.Runs) != 0 || len(n.Maintenance) == 0 || n.Maintenance[0].Source != "NodeMaintenance" {
		t.Errorf("after the drain, %s = %+v, want cordoned under the NodeMaintenance with no run", nodes[0], n)
	}
	if r := after[nodes[1]].Runs; len(r) != 1 || r[0].Name != "llm" || r[0].Attempt != 2 || !slices.Equal(r[0].Indexes, []int32{0, 1}) {
		t.Errorf("after the drain, runs on %s = %+v, want llm attempt 2 indexes [0 1]", nodes[1], r)
	}
}
