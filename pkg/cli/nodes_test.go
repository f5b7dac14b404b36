package cli

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/maintenance"
)

// gpuNode is a Ready node with 8 GPUs.
func gpuNode(name string, mutate ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")},
			Allocatable: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("8")},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
				{Type: v1alpha1.NodeConditionGPUHealthy, Status: corev1.ConditionTrue, Reason: v1alpha1.GPUReasonHealthy, LastTransitionTime: *at(0)},
			},
		},
	}
	for _, m := range mutate {
		m(&n)
	}
	return n
}

func worker(run *v1alpha1.TrainingRun, att int32, index int, node string) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: run.Name + "-" + strconv.Itoa(index), Namespace: run.Namespace,
			Labels:      attempt.Labels(run, att),
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(index)},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	p.Labels[v1alpha1.LabelRunUID] = string(run.UID)
	return p
}

func agentPod(node string, phase corev1.PodPhase, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "faultline-nodeagent-" + node, Namespace: v1alpha1.NodeAgentNamespace},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// nodeFixture: gpu-a holds both workers of llm (the coordinator among them) and is
// cordoned by an SRE's NodeMaintenance that found llm with nowhere to go; gpu-b has an XID,
// an announced shutdown and a worker of an older attempt of llm (going anyway: not shown);
// gpu-c has a GKE maintenance in 2 hours and no agent; gpu-d a CSPMaintenance condition and
// an agent without the lock.
func nodeFixture() NodeInputs {
	llm := makeRun("llm", 2).phase(v1alpha1.PhaseRunning, 2, 2).obj()
	nodes := []corev1.Node{
		gpuNode("gpu-a", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		gpuNode("gpu-b", func(n *corev1.Node) {
			n.Status.Allocatable[v1alpha1.ResourceGPU] = resource.MustParse("7")
			n.Status.Conditions[1] = corev1.NodeCondition{Type: v1alpha1.NodeConditionGPUHealthy, Status: corev1.ConditionFalse, Reason: "Xid79", LastTransitionTime: *at(35)}
			n.Annotations[v1alpha1.AnnotationShutdownDetectedAt] = at(80).Format(time.RFC3339Nano)
		}),
		gpuNode("gpu-c", func(n *corev1.Node) {
			n.Labels[v1alpha1.LabelGKEScheduledMaintenanceTime] = strconv.FormatInt(now.Add(2*time.Hour).Unix(), 10)
		}),
		gpuNode("gpu-d", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: v1alpha1.NodeConditionCSPMaintenance, Status: corev1.ConditionTrue, Message: "host migration at 12:00Z"})
		}),
	}
	nm := v1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-x7k2p", CreationTimestamp: *at(60)},
		Spec:       v1alpha1.NodeMaintenanceSpec{Nodes: []string{"gpu-a"}, Reason: "firmware FW-2291"},
		Status: v1alpha1.NodeMaintenanceStatus{
			Phase: v1alpha1.MaintenanceBlocked, StartTime: at(60),
			Nodes: []v1alpha1.MaintenanceNode{{Name: "gpu-a", CordonedAt: at(61)}},
			Runs: []v1alpha1.MaintenanceRun{{Namespace: "research", Name: "llm", Attempt: 2, Indexes: []int32{0, 1}, Nodes: []string{"gpu-a"},
				Coordinator: true, Feasible: false, Message: "2 workers of 2 nvidia.com/gpu: 0 fit off the drained nodes"}},
		},
	}
	return NodeInputs{
		Heartbeats: []coordinationv1.Lease{
			heartbeat("gpu-a", allOn()),
			heartbeat("gpu-b", func() v1alpha1.AgentCapabilities {
				c := allOn()
				c.GPUMonitoring = v1alpha1.Capability{Reason: v1alpha1.CapabilityNVMLNotFound, Message: "libnvidia-ml not found (looked in /host/run/nvidia/driver (GPU Operator), /host (host), /host/home/kubernetes/bin/nvidia (GKE), the dynamic loader's path)"}
				return c
			}()),
			heartbeat("gpu-d", func() v1alpha1.AgentCapabilities {
				c := allOn()
				c.ShutdownLock = v1alpha1.Capability{Reason: v1alpha1.CapabilityNotHeld, Message: "logind's delay inhibitor lock is not held: a shutdown would go unseen"}
				return c
			}()),
		},
		Nodes:        nodes,
		Workers:      []corev1.Pod{worker(llm, 2, 1, "gpu-a"), worker(llm, 2, 0, "gpu-a"), worker(llm, 1, 1, "gpu-b")},
		Runs:         []v1alpha1.TrainingRun{*llm},
		AgentPods:    []corev1.Pod{agentPod("gpu-a", corev1.PodRunning, true), agentPod("gpu-b", corev1.PodRunning, true), agentPod("gpu-d", corev1.PodRunning, false)},
		Maintenances: []v1alpha1.NodeMaintenance{nm},
		Config:       maintenance.DefaultConfig(),
		Now:          now,
	}
}

// allOn is what an agent that sees everything says of itself.
func allOn() v1alpha1.AgentCapabilities {
	ok := v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK}
	return v1alpha1.AgentCapabilities{
		GPUMonitoring: v1alpha1.Capability{Enabled: true, Reason: v1alpha1.CapabilityOK, Message: "NVML watches 8 GPUs"},
		ShutdownLock:  ok, PodResources: ok,
		InPlace: v1alpha1.Capability{Enabled: true, Reason: v1alpha1.InPlaceReasonRuntimeReady},
		DRA:     v1alpha1.Capability{Reason: v1alpha1.CapabilityNotSupported},
	}
}

func heartbeat(node string, caps v1alpha1.AgentCapabilities) coordinationv1.Lease {
	l := agentlease.New(node, now, agentlease.Duration)
	if _, err := agentlease.SetCapabilities(l, caps); err != nil {
		panic(err)
	}
	return *l
}

func TestNodeReports(t *testing.T) {
	in := nodeFixture()
	got := NodeReports(in)
	sched := metav1.NewTime(time.Unix(now.Add(2*time.Hour).Unix(), 0))
	shutdown := metav1.NewTime(at(80).Time)
	want := []NodeReport{
		{
			Name: "gpu-a", GPUs: NodeGPUs{Healthy: 8, Total: 8, Condition: "True", Reason: v1alpha1.GPUReasonHealthy, Since: at(0)},
			Agent: AgentLocked, AgentPod: "faultline-nodeagent-gpu-a", Cordoned: true, Capabilities: ptr.To(allOn()),
			Maintenance: []NodeSignal{
				{Source: maintenance.SourceNodeMaintenance, Name: "drain-x7k2p", Reason: "firmware FW-2291"},
				{Source: maintenance.SourceCordon, Name: corev1.TaintNodeUnschedulable},
			},
			Runs: []NodeRun{{Namespace: "research", Name: "llm", Attempt: 2, Indexes: []int32{0, 1}, Coordinator: true,
				Blocked: "2 workers of 2 nvidia.com/gpu: 0 fit off the drained nodes"}},
		},
		{
			Name: "gpu-b", GPUs: NodeGPUs{Healthy: 0, Total: 8, Condition: "False", Reason: "Xid79", Since: at(35)},
			Agent: AgentLocked, AgentPod: "faultline-nodeagent-gpu-b", ShutdownAnnouncedAt: &shutdown,
			Capabilities: agentlease.Capabilities(&in.Heartbeats[1], "gpu-b"),
		},
		{
			Name: "gpu-c", GPUs: NodeGPUs{Healthy: 8, Total: 8, Condition: "True", Reason: v1alpha1.GPUReasonHealthy, Since: at(0)},
			Agent: AgentNone, ScheduledMaintenance: &sched,
		},
		{
			Name: "gpu-d", GPUs: NodeGPUs{Healthy: 8, Total: 8, Condition: "True", Reason: v1alpha1.GPUReasonHealthy, Since: at(0)},
			Agent: AgentNoLock, AgentPod: "faultline-nodeagent-gpu-d", Capabilities: agentlease.Capabilities(&in.Heartbeats[2], "gpu-d"),
			Maintenance: []NodeSignal{{Source: maintenance.SourceCondition, Name: v1alpha1.NodeConditionCSPMaintenance, Reason: "host migration at 12:00Z"}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NodeReports (-want +got):\n%s", d)
	}
}

// TestNodeReportsUnreadable: pods and runs the caller may not list (an SRE) make the runs
// and agents <unknown>, never "none".
func TestNodeReportsUnreadable(t *testing.T) {
	in := nodeFixture()
	in.Workers, in.Runs, in.AgentPods = nil, nil, nil
	for _, r := range NodeReports(in) {
		if !r.RunsUnknown || r.Runs != nil || r.Agent != AgentUnknown {
			t.Errorf("%s: runsUnknown=%t runs=%v agent=%s, want unknown runs and agent", r.Name, r.RunsUnknown, r.Runs, r.Agent)
		}
	}
	var buf bytes.Buffer
	if err := PrintNodes(&buf, NodeReports(in)[:1], FormatTable, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "nodes-unreadable", buf.Bytes())
}

func TestGoldenNodes(t *testing.T) {
	reports := NodeReports(nodeFixture())
	for _, f := range []Format{FormatTable, FormatWide, FormatJSON} {
		t.Run(string(f), func(t *testing.T) {
			var buf bytes.Buffer
			if err := PrintNodes(&buf, reports, f, now); err != nil {
				t.Fatal(err)
			}
			golden(t, "nodes-"+string(f), buf.Bytes())
		})
	}
	if got, want := Blocked(reports), []string{"research/llm on gpu-a: 2 workers of 2 nvidia.com/gpu: 0 fit off the drained nodes"}; !cmp.Equal(got, want) {
		t.Errorf("Blocked = %q, want %q", got, want)
	}
}

func planFixture() *v1alpha1.NodeMaintenance {
	return &v1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-x7k2p"},
		Spec:       v1alpha1.NodeMaintenanceSpec{Nodes: []string{"gpu-a", "gpu-b", "gpu-z"}, Reason: "firmware FW-2291"},
		Status: v1alpha1.NodeMaintenanceStatus{
			Phase: v1alpha1.MaintenanceDraining, StartTime: at(60),
			Nodes: []v1alpha1.MaintenanceNode{{Name: "gpu-a"}, {Name: "gpu-b"}, {Name: "gpu-z", Missing: true}},
			Runs: []v1alpha1.MaintenanceRun{
				{Namespace: "research", Name: "big", Attempt: 1, Indexes: []int32{0}, Nodes: []string{"gpu-b"}, Coordinator: true,
					Message: "1 workers of 8 nvidia.com/gpu: 0 fit off the drained nodes"},
				{Namespace: "research", Name: "llm", Attempt: 3, Indexes: []int32{0, 1, 5}, Nodes: []string{"gpu-a", "gpu-b"}, Coordinator: true, Feasible: true},
				{Namespace: "vision", Name: "vit", Attempt: 1, Indexes: []int32{6, 7}, Nodes: []string{"gpu-a"}, Feasible: true},
			},
		},
	}
}

func TestGoldenDrainPlan(t *testing.T) {
	for name, mutate := range map[string]func(*v1alpha1.NodeMaintenance){
		"drain-plan": func(*v1alpha1.NodeMaintenance) {},
		"drain-plan-dry-run": func(nm *v1alpha1.NodeMaintenance) {
			nm.Spec.DryRun, nm.Status.Phase = true, v1alpha1.MaintenancePlanned
		},
		"drain-plan-empty": func(nm *v1alpha1.NodeMaintenance) { nm.Status.Runs = nil },
	} {
		t.Run(name, func(t *testing.T) {
			nm := planFixture()
			mutate(nm)
			var buf bytes.Buffer
			if err := PrintPlan(&buf, nm); err != nil {
				t.Fatal(err)
			}
			golden(t, name, buf.Bytes())
		})
	}
}

func TestGoldenDrainMoves(t *testing.T) {
	nm := planFixture()
	nm.Status.Phase, nm.Status.DrainedTime = v1alpha1.MaintenanceDrained, at(70)
	nm.Status.Runs[1].MovedAt, nm.Status.Runs[1].ToAttempt, nm.Status.Runs[1].RunningAt = at(61), 4, at(63)
	nm.Status.Runs[2].MovedAt, nm.Status.Runs[2].ToAttempt, nm.Status.Runs[2].Gone = at(61), 0, true
	var buf bytes.Buffer
	if err := PrintMoves(&buf, nm); err != nil {
		t.Fatal(err)
	}
	golden(t, "drain-moves", buf.Bytes())
}

func TestSettled(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.NodeMaintenance)
		want   bool
	}{
		"draining":                    {func(nm *v1alpha1.NodeMaintenance) {}, false},
		"drained, a run not yet back": {func(nm *v1alpha1.NodeMaintenance) { nm.Status.Phase = v1alpha1.MaintenanceDrained }, false},
		"drained, every run back":     {func(nm *v1alpha1.NodeMaintenance) { nm.Status.Phase = v1alpha1.MaintenanceDrained; back(nm) }, true},
		"completed, every run back":   {func(nm *v1alpha1.NodeMaintenance) { nm.Status.Phase = v1alpha1.MaintenanceCompleted; back(nm) }, true},
		"blocked (a run cannot move)": {func(nm *v1alpha1.NodeMaintenance) { nm.Status.Phase = v1alpha1.MaintenanceBlocked; back(nm) }, false},
		"drained, a run gone (delete)": {func(nm *v1alpha1.NodeMaintenance) {
			nm.Status.Phase = v1alpha1.MaintenanceDrained
			back(nm)
			nm.Status.Runs[1].RunningAt, nm.Status.Runs[1].Gone = nil, true
		}, true},
	} {
		t.Run(name, func(t *testing.T) {
			nm := planFixture()
			tc.mutate(nm)
			if got := Settled(nm); got != tc.want {
				t.Errorf("Settled = %t, want %t", got, tc.want)
			}
		})
	}
}

func back(nm *v1alpha1.NodeMaintenance) {
	for i := range nm.Status.Runs {
		if nm.Status.Runs[i].Feasible {
			nm.Status.Runs[i].RunningAt = at(70)
		}
	}
}

func TestDrainRequestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		req  DrainRequest
		want string
	}{
		"no node":     {DrainRequest{}, "drain needs the nodes to drain: launcher drain NODE... (`launcher nodes` lists them)"},
		"twice":       {DrainRequest{Nodes: []string{"a", "a"}}, "node a is named twice: name each node once"},
		"long reason": {DrainRequest{Nodes: []string{"a"}, Reason: string(make([]byte, 300))}, "--reason is 300 characters long; the runs' owners read it in events: keep it to 256"},
		"ok":          {DrainRequest{Nodes: []string{"a", "b"}, Reason: "FW-1"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.req.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
	if nm := (DrainRequest{Nodes: []string{"a"}, DryRun: true}).Object(); nm.GenerateName != "dry-run-" || !nm.Spec.DryRun {
		t.Errorf("a dry run's object = %+v, want generateName dry-run- and spec.dryRun", nm)
	}
}

// TestAgentWhoseImageCannotBePulled: an agent pod held by the kubelet on its image is named by
// the kubelet's reason, with its words (the image), never a bare Pending.
func TestAgentWhoseImageCannotBePulled(t *testing.T) {
	p := agentPod("gpu-a", corev1.PodPending, false)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "nodeagent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.example/faultline-nodeagent:v1"`}}}}
	state, pod, why := agentOf(&p, true)
	if state != "ImagePullBackOff" || pod != p.Name || !strings.Contains(why, "registry.example/faultline-nodeagent:v1") {
		t.Errorf("agentOf = %q, %q, %q; want ImagePullBackOff naming the image", state, pod, why)
	}
	if state, _, why := agentOf(ptr.To(agentPod("gpu-a", corev1.PodPending, false)), true); state != AgentPending || why != "" {
		t.Errorf("a pod with no word from the kubelet: %q %q, want Pending", state, why)
	}
}
