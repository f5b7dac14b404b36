package maintenance

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

type nodeBuilder struct{ n *corev1.Node }

func makeNode(name string) nodeBuilder {
	gpus := resource.MustParse("8")
	return nodeBuilder{&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{v1alpha1.ResourceGPU: gpus, corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}}
}

func (b nodeBuilder) cordoned() nodeBuilder { b.n.Spec.Unschedulable = true; return b }
func (b nodeBuilder) label(k, v string) nodeBuilder {
	b.n.Labels[k] = v
	return b
}
func (b nodeBuilder) condition(t string, s corev1.ConditionStatus, msg string) nodeBuilder {
	b.n.Status.Conditions = append(b.n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(t), Status: s, Message: msg})
	return b
}
func (b nodeBuilder) taint(k string, e corev1.TaintEffect) nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: k, Effect: e})
	return b
}
func (b nodeBuilder) obj() *corev1.Node { return b.n }

func drain(name string, nodes ...string) v1alpha1.NodeMaintenance {
	return v1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeMaintenanceSpec{Nodes: nodes, Reason: "firmware"}}
}

func TestOf(t *testing.T) {
	cordonedFor := drain("fw", "n1")
	cordonedFor.Status.Nodes = []v1alpha1.MaintenanceNode{{Name: "n1", CordonedAt: &metav1.Time{Time: now}}}
	dry := drain("plan", "n1")
	dry.Spec.DryRun = true
	cases := map[string]struct {
		node     *corev1.Node
		nms      []v1alpha1.NodeMaintenance
		cfg      Config
		want     []string // sources
		wantNext time.Time
	}{
		"a quiet node":                                     {node: makeNode("n1").obj(), cfg: DefaultConfig()},
		"a NodeMaintenance not yet cordoned":               {node: makeNode("n1").obj(), nms: []v1alpha1.NodeMaintenance{drain("fw", "n1")}, cfg: DefaultConfig(), want: []string{SourceNodeMaintenance}},
		"a dry run is no maintenance":                      {node: makeNode("n1").obj(), nms: []v1alpha1.NodeMaintenance{dry}, cfg: DefaultConfig()},
		"another node's maintenance":                       {node: makeNode("n2").obj(), nms: []v1alpha1.NodeMaintenance{drain("fw", "n1")}, cfg: DefaultConfig()},
		"cordoned by its NodeMaintenance":                  {node: makeNode("n1").cordoned().obj(), nms: []v1alpha1.NodeMaintenance{cordonedFor}, cfg: DefaultConfig(), want: []string{SourceNodeMaintenance, SourceCordon}},
		"uncordoned after the maintenance's cordon: over":  {node: makeNode("n1").obj(), nms: []v1alpha1.NodeMaintenance{cordonedFor}, cfg: DefaultConfig()},
		"a cordon alone":                                   {node: makeNode("n1").cordoned().obj(), cfg: DefaultConfig(), want: []string{SourceCordon}},
		"the unschedulable taint alone":                    {node: makeNode("n1").taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule).obj(), cfg: DefaultConfig(), want: []string{SourceCordon}},
		"Karpenter's disruption taint":                     {node: makeNode("n1").taint(v1alpha1.TaintKarpenterDisrupted, corev1.TaintEffectNoSchedule).obj(), cfg: DefaultConfig(), want: []string{SourceDisruptionTaint}},
		"the cluster autoscaler's scale-down taint":        {node: makeNode("n1").taint(v1alpha1.TaintClusterAutoscalerToBeDeleted, corev1.TaintEffectNoSchedule).obj(), cfg: DefaultConfig(), want: []string{SourceDisruptionTaint}},
		"a disruption taint when cordons are not acted on": {node: makeNode("n1").taint(v1alpha1.TaintKarpenterDisrupted, corev1.TaintEffectNoSchedule).obj(), cfg: Config{Lead: DefaultLead}},
		"another party's taint":                            {node: makeNode("n1").taint("example.com/dedicated", corev1.TaintEffectNoSchedule).obj(), cfg: DefaultConfig()},
		"a cordon when cordons are not acted on":           {node: makeNode("n1").cordoned().obj(), cfg: Config{Lead: DefaultLead}},
		"GKE maintenance within the lead":                  {node: makeNode("n1").label(v1alpha1.LabelGKEScheduledMaintenanceTime, unix(now.Add(10*time.Minute))).obj(), cfg: DefaultConfig(), want: []string{SourceGKEScheduled}},
		"GKE maintenance later: due at start - lead":       {node: makeNode("n1").label(v1alpha1.LabelGKEScheduledMaintenanceTime, unix(now.Add(2*time.Hour))).obj(), cfg: DefaultConfig(), wantNext: now.Add(90 * time.Minute)},
		"a garbled GKE label is no signal":                 {node: makeNode("n1").label(v1alpha1.LabelGKEScheduledMaintenanceTime, "soon").obj(), cfg: DefaultConfig()},
		"CSPMaintenance True":                              {node: makeNode("n1").condition("CSPMaintenance", corev1.ConditionTrue, "GCE maintenance").obj(), cfg: DefaultConfig(), want: []string{SourceCondition}},
		"CSPMaintenance False":                             {node: makeNode("n1").condition("CSPMaintenance", corev1.ConditionFalse, "").obj(), cfg: DefaultConfig()},
		"a condition not configured":                       {node: makeNode("n1").condition("CSPMaintenance", corev1.ConditionTrue, "").obj(), cfg: Config{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, next := Of(tc.node, tc.nms, tc.cfg, now)
			var sources []string
			for _, s := range got {
				sources = append(sources, s.Source)
				if s.Node != tc.node.Name || s.String() == "" {
					t.Errorf("signal %+v: wrong node or empty text", s)
				}
			}
			if diff := cmp.Diff(tc.want, sources); diff != "" {
				t.Errorf("sources (-want +got):\n%s", diff)
			}
			if !next.Equal(tc.wantNext) {
				t.Errorf("next = %v, want %v", next, tc.wantNext)
			}
		})
	}
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestLift(t *testing.T) {
	kept, lifted := Lift([]string{"a", "b", "c"}, func(n string) bool { return n == "b" })
	if diff := cmp.Diff([]string{"b"}, kept); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"a", "c"}, lifted); diff != "" {
		t.Error(diff)
	}
}

func worker(run *v1alpha1.TrainingRun, attemptN int32, index int, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: run.Namespace, Name: run.Name + "-" + strconv.Itoa(index),
			Labels:      map[string]string{v1alpha1.LabelRun: run.Name, v1alpha1.LabelRunUID: string(run.UID), v1alpha1.LabelAttempt: strconv.Itoa(int(attemptN))},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(index)},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func makeRun(ns, name string, workers, gpus int32, attemptN int32) *v1alpha1.TrainingRun {
	q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: v1alpha1.TrainingRunSpec{Workers: workers, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "w", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.ResourceGPU: q}},
		}}}}},
		Status: v1alpha1.TrainingRunStatus{Attempt: attemptN},
	}
}

func TestHits(t *testing.T) {
	a := makeRun("team-a", "llm", 4, 8, 2)
	b := makeRun("team-b", "bert", 2, 8, 1)
	stranger := makeRun("team-a", "llm", 4, 8, 2)
	stranger.UID = "another"
	pods := []*corev1.Pod{
		worker(a, 2, 0, "n1", corev1.PodRunning),
		worker(a, 2, 3, "n1", corev1.PodRunning),
		worker(a, 2, 1, "n2", corev1.PodRunning),
		worker(a, 2, 2, "n9", corev1.PodRunning), // not drained
		worker(a, 1, 2, "n1", corev1.PodRunning), // an older attempt, going anyway
		worker(b, 1, 1, "n2", corev1.PodRunning),
		worker(b, 1, 0, "n2", corev1.PodFailed), // ended
		worker(stranger, 2, 5, "n1", corev1.PodRunning),
	}
	runs := map[string]*v1alpha1.TrainingRun{"team-a/llm": a, "team-b/bert": b}
	got := Hits(pods, runs, []string{"n1", "n2"})
	want := []v1alpha1.MaintenanceRun{
		{Namespace: "team-a", Name: "llm", Attempt: 2, Indexes: []int32{0, 1, 3}, Nodes: []string{"n1", "n2"}, Coordinator: true},
		{Namespace: "team-b", Name: "bert", Attempt: 1, Indexes: []int32{1}, Nodes: []string{"n2"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Hits (-want +got):\n%s", diff)
	}
}

func TestFeasible(t *testing.T) {
	run := makeRun("ns", "r", 2, 8, 1)
	tolerating := makeRun("ns", "r", 2, 8, 1)
	tolerating.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	excluding := makeRun("ns", "r", 2, 8, 1)
	excluding.Status.MaintenanceExcludedNodes = []string{"n3"}
	nodes := func(bs ...nodeBuilder) []*corev1.Node {
		var out []*corev1.Node
		for _, b := range bs {
			out = append(out, b.obj())
		}
		return out
	}
	cases := map[string]struct {
		run     *v1alpha1.TrainingRun
		nodes   []*corev1.Node
		used    map[string]corev1.ResourceList
		drained []string
		want    bool
	}{
		"two free nodes besides the drained one": {run: run, nodes: nodes(makeNode("n1"), makeNode("n2"), makeNode("n3")), drained: []string{"n1"}, want: true},
		"only one left":                          {run: run, nodes: nodes(makeNode("n1"), makeNode("n2")), drained: []string{"n1"}},
		"a cordoned node does not count":         {run: run, nodes: nodes(makeNode("n1"), makeNode("n2"), makeNode("n3").cordoned()), drained: []string{"n1"}},
		"a node whose GPUs are taken":            {run: run, nodes: nodes(makeNode("n1"), makeNode("n2"), makeNode("n3")), drained: []string{"n1"}, used: map[string]corev1.ResourceList{"n3": {v1alpha1.ResourceGPU: resource.MustParse("1")}}},
		"a taint not tolerated":                  {run: run, nodes: nodes(makeNode("n2"), makeNode("n3").taint("dedicated", corev1.TaintEffectNoSchedule)), want: false},
		"a taint tolerated":                      {run: tolerating, nodes: nodes(makeNode("n2"), makeNode("n3").taint("dedicated", corev1.TaintEffectNoSchedule)), want: true},
		"an excluded node does not count":        {run: excluding, nodes: nodes(makeNode("n2"), makeNode("n3"))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ok, why := Feasible(GangOf(tc.run), tc.nodes, tc.used, tc.drained)
			if ok != tc.want {
				t.Fatalf("Feasible = %t (%s), want %t", ok, why, tc.want)
			}
			if !ok && !strings.Contains(why, "nvidia.com/gpu 8") {
				t.Errorf("why %q does not name a worker's GPUs", why)
			}
		})
	}
}

// TestFactsSeeTheDisruptionTaints: the controller wakes a node's runs when Facts change; a
// disruption taint that Facts did not show would never move a run.
func TestFactsSeeTheDisruptionTaints(t *testing.T) {
	plain := makeNode("n1").obj()
	for _, key := range v1alpha1.DisruptionTaints {
		tainted := makeNode("n1").taint(key, corev1.TaintEffectNoSchedule).obj()
		if Facts(plain, DefaultConfig()) == Facts(tainted, DefaultConfig()) {
			t.Errorf("Facts do not change with the taint %s: %q", key, Facts(tainted, DefaultConfig()))
		}
	}
}
