package realnode

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealAgentWithoutNVMLSaysSo: a node agent that finds no NVML library under any root (the
// node's root as the agent sees it holds none, nor does the dynamic loader's path) runs on,
// holding its shutdown lock, and is never silently blind: its heartbeat says GPU monitoring
// is off, why and where it looked; `launcher nodes` shows it; and a run whose worker asks
// for a GPU on that node gets the GPUMonitoring condition False, and a warning event, naming
// the node and why.
//
// It runs alone: it restarts a node's agent without its mock GPUs (and restarts it as it was
// before it ends).
func TestRealAgentWithoutNVMLSaysSo(t *testing.T) {
	if out, _ := exec.Command("ldconfig", "-p").Output(); strings.Contains(string(out), "libnvidia-ml.so.1") {
		t.Skip("this machine's dynamic loader finds libnvidia-ml.so.1: the test needs a node without the NVIDIA driver")
	}
	ctx, c, ns := scenario(t, 3*time.Minute)
	startController(t, c, ns)
	n := c.Real.Nodes[len(c.Real.Nodes)-1]
	t.Cleanup(func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := startAgent(rctx, c, n); err != nil {
			t.Errorf("start the node agent of %s again with its mock GPUs: %v", n.Name, err)
		}
	})
	const hostRoot = "/nonexistent/faultline-test-host"
	if err := startAgentWith(ctx, c, n, cluster.AgentOptions{RealNVML: true, Args: []string{"--host-root", hostRoot}}); err != nil {
		t.Fatal(err)
	}

	// The heartbeat says so, and where the agent looked; and, once the agent took it (its
	// capabilities are checked again every heartbeat interval), that it holds its lock.
	var caps *v1alpha1.AgentCapabilities
	if _, err := c.WaitAgentLease(ctx, n.Name, func(l *coordinationv1.Lease) bool {
		caps = agentlease.Capabilities(l, n.Name)
		return caps != nil && !caps.GPUMonitoring.Enabled && caps.ShutdownLock.Enabled
	}); err != nil {
		t.Fatalf("the heartbeat of %s never said GPU monitoring is off, the lock held (last: %+v): %v", n.Name, caps, err)
	}
	if g := caps.GPUMonitoring; g.Reason != v1alpha1.CapabilityNVMLNotFound || !strings.Contains(g.Message, hostRoot+"/run/nvidia/driver") || !strings.Contains(g.Message, "dynamic loader") {
		t.Errorf("GPU monitoring off for %q: %q; want NVMLNotFound, naming the roots it looked in under %s and the dynamic loader", g.Reason, g.Message, hostRoot)
	}
	if !caps.PodResources.Enabled || !caps.InPlace.Enabled {
		t.Errorf("capabilities %+v: the agent without NVML still reads the kubelet's PodResources and restarts in place", caps)
	}

	// `launcher nodes` shows it.
	out, err := exec.CommandContext(ctx, launcherBin, "nodes", "-o", "json", "--kubeconfig", c.Kubeconfig).Output()
	if err != nil {
		t.Fatalf("launcher nodes: %v", err)
	}
	// Read as the JSON it is: pkg/cli would link kustomize, and with it Go's plugin package,
	// whose immediate binding this binary's NVML symbols cannot meet (test/layering).
	var list struct {
		Items []struct {
			Name         string                      `json:"name"`
			Capabilities *v1alpha1.AgentCapabilities `json:"capabilities"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("launcher nodes -o json: %v\n%s", err, out)
	}
	shown := false
	for _, r := range list.Items {
		if r.Name == n.Name {
			shown = r.Capabilities != nil && !r.Capabilities.GPUMonitoring.Enabled && r.Capabilities.GPUMonitoring.Reason == v1alpha1.CapabilityNVMLNotFound
		}
	}
	if !shown {
		t.Errorf("launcher nodes does not show GPU monitoring off on %s:\n%s", n.Name, out)
	}

	// A run whose worker asks for a GPU there is told.
	run := createRun(ctx, t, c, ns, realRun("blind", 1, []string{"--heartbeats-only"}, withGPUs(1), func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.NodeSelector[corev1.LabelHostname] = n.Name
	}))
	got := waitRun(ctx, t, c, ns, run.Name, "GPUMonitoring False", func(r *v1alpha1.TrainingRun) bool {
		return meta.IsStatusConditionFalse(r.Status.Conditions, v1alpha1.ConditionGPUMonitoring)
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionGPUMonitoring)
	if cond.Reason != v1alpha1.ReasonNodesNotMonitored || !strings.Contains(cond.Message, n.Name+" ("+v1alpha1.CapabilityNVMLNotFound) {
		t.Errorf("GPUMonitoring %s: %s; want NodesNotMonitored naming %s and why", cond.Reason, cond.Message, n.Name)
	}
	// The event is recorded apart from the status write, maybe after it.
	lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "events", ns,
		fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", run.Name), fields.OneTermEqualSelector("reason", v1alpha1.ReasonNodesNotMonitored)))
	if _, err := watchtools.UntilWithSync(ctx, lw, &corev1.Event{}, nil, func(e watch.Event) (bool, error) {
		ev, ok := e.Object.(*corev1.Event)
		return ok && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, n.Name), nil
	}); err != nil {
		t.Errorf("no warning event %s on run %s naming %s: %v", v1alpha1.ReasonNodesNotMonitored, run.Name, n.Name, err)
	}
}
