package trust

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// runLauncher runs the built launcher with kubeconfig and returns its output and exit code.
func runLauncher(ctx context.Context, t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, launcherBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("launcher %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ launcher %s → exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

// TestE2ESRERoleDrainsWithoutTheRunsNamespaces: an SRE's account bound to the installed
// faultline-sre ClusterRole and nothing else plans a drain with `launcher drain --dry-run`
// (the controller finds the run, its indexes and coordinator for it, and the plan calls out
// that the run, pinned to the node by its nodeSelector, cannot move), and `launcher nodes`
// says <unknown> for the runs and agents it may not read, with a warning, rather than
// "none"; it may neither read the runs in their namespace nor uncordon a node. The admin's
// `launcher nodes` shows the run and the node's agent pod.
func TestE2ESRERoleDrainsWithoutTheRunsNamespaces(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	const shard = "test.faultline.dev/ns"
	startController(ctx, t, c, ns, "--leader-elect=false", "--node-maintenance-selector", shard+"="+ns)
	node := cluster.NodeName(1)
	run := newRun("sre-visible", 2)
	run.Namespace = ns
	run.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	asAdmin := clientFor(t, c.Config)
	if err := asAdmin.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	runningWorkers(ctx, t, c, ns, run.Name, 2)

	// The SRE: a ServiceAccount bound cluster-wide to faultline-sre, as docs/sre.md says.
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sre"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sre-drain-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "faultline-sre"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "sre", Namespace: ns}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	sreKubeconfig, sreCfg, err := c.ServiceAccountKubeconfig(ctx, ns, "sre", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	asSRE := clientFor(t, sreCfg)
	// RBAC takes effect some time after the binding: wait until the SRE may list
	// NodeMaintenances.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return asSRE.List(ctx, &v1alpha1.NodeMaintenanceList{}) == nil, nil
	}); err != nil {
		t.Fatalf("the faultline-sre binding never let the SRE list nodemaintenances: %v", err)
	}

	out, errOut, code := runLauncher(ctx, t, sreKubeconfig, "drain", node, "--dry-run", "--reason", "firmware FW-"+ns, "--label", shard+"="+ns)
	if code != 0 || !strings.Contains(errOut, "nodemaintenance.faultline.dev/dry-run-") {
		t.Fatalf("the SRE's drain --dry-run: exit %d, stderr %q", code, errOut)
	}
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == ns && f[1] == run.Name {
			row = f
		}
	}
	// The run's nodeSelector pins it to the node: the plan says it cannot move, and why.
	if !slices.Equal(row, []string{ns, run.Name, "1", "0,1", "yes", "(index", "0)", node, "BLOCKED"}) {
		t.Errorf("the SRE's plan: %s's row %q, want attempt 1, indexes 0,1, the coordinator, %s, BLOCKED", run.Name, row, node)
	}
	if !strings.Contains(out, "1 run(s) have no feasible placement off these nodes and will NOT be moved") || !strings.Contains(out, "  "+ns+"/"+run.Name+": the gang needs 2 workers") {
		t.Errorf("the SRE's plan does not call out %s as having no placement, with the reason:\n%s", run.Name, out)
	}

	out, errOut, code = runLauncher(ctx, t, sreKubeconfig, "nodes", "-l", corev1.LabelHostname+"="+node, "-o", "json")
	var list cli.NodeList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 1 {
		t.Fatalf("the SRE's launcher nodes -o json: exit %d, %q", code, out)
	}
	if r := list.Items[0]; !r.RunsUnknown || r.Runs != nil || r.Agent != cli.AgentUnknown {
		t.Errorf("the SRE's view of %s: %+v, want runs and agent unknown (not readable with faultline-sre)", node, r)
	}
	if !strings.Contains(errOut, "warning: runs on the nodes not shown") || !strings.Contains(errOut, "launcher drain --dry-run") {
		t.Errorf("the SRE's launcher nodes does not warn that the runs are hidden, and where to look: %q", errOut)
	}

	// Nothing in the runs' namespaces, and no uncordon: that is the platform team's.
	err = asSRE.Get(ctx, types.NamespacedName{Namespace: ns, Name: run.Name}, &v1alpha1.TrainingRun{})
	requireForbidden(t, "the SRE reading the run", err, `cannot get resource "trainingruns"`)
	sreKube, err := kubernetes.NewForConfig(sreCfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sreKube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	requireForbidden(t, "the SRE patching a node", err, `cannot patch resource "nodes"`)

	out, _, code = runLauncher(ctx, t, c.Kubeconfig, "nodes", "-l", corev1.LabelHostname+"="+node, "-o", "json")
	list = cli.NodeList{}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Items) != 1 {
		t.Fatalf("the admin's launcher nodes -o json: exit %d, %q", code, out)
	}
	r := list.Items[0]
	if !slices.ContainsFunc(r.Runs, func(x cli.NodeRun) bool {
		return x.Namespace == ns && x.Name == run.Name && x.Attempt == 1 && slices.Equal(x.Indexes, []int32{0, 1}) && x.Coordinator
	}) {
		t.Errorf("the admin's view of %s: runs %+v, want %s attempt 1 indexes [0 1] with the coordinator", node, r.Runs, run.Name)
	}
	if r.AgentPod != dsPods[node].Name {
		t.Errorf("the admin's view of %s: agent pod %q, want the DaemonSet's %s", node, r.AgentPod, dsPods[node].Name)
	}
}
