package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

func inPlaceNode(name string, declares bool, ready corev1.ConditionStatus, labels map[string]string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if declares {
		n.Status.DeclaredFeatures = []string{"SomethingElse", v1alpha1.FeatureRestartAllContainers}
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionInPlaceReady, Status: ready, Message: "no CRI socket"}}
	}
	return n
}

// TestInPlaceSupport: every schedulable node the template's nodeSelector selects must declare
// the kubelet's feature and have its agent ready; nodes it does not select do not count.
func TestInPlaceSupport(t *testing.T) {
	gpu := map[string]string{"pool": "gpu"}
	run := &v1alpha1.TrainingRun{Spec: v1alpha1.TrainingRunSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: gpu}}}}
	cordoned := inPlaceNode("cordoned", false, "", gpu)
	cordoned.Spec.Unschedulable = true
	cases := map[string]struct {
		nodes []corev1.Node
		ok    bool
		names string
	}{
		"all able":              {[]corev1.Node{inPlaceNode("a", true, corev1.ConditionTrue, gpu), inPlaceNode("cpu", false, "", nil)}, true, ""},
		"no node selected":      {[]corev1.Node{inPlaceNode("cpu", true, corev1.ConditionTrue, nil)}, false, ""},
		"a cordoned one aside":  {[]corev1.Node{inPlaceNode("a", true, corev1.ConditionTrue, gpu), cordoned}, true, ""},
		"a kubelet without it":  {[]corev1.Node{inPlaceNode("a", true, corev1.ConditionTrue, gpu), inPlaceNode("old", false, corev1.ConditionTrue, gpu)}, false, "old (its kubelet does not declare"},
		"an agent not ready":    {[]corev1.Node{inPlaceNode("b", true, corev1.ConditionFalse, gpu)}, false, "b (its node agent is not ready: no CRI socket)"},
		"an agent that is mute": {[]corev1.Node{inPlaceNode("c", true, "", gpu)}, false, "c (its node agent does not report"},
	}
	for name, tc := range cases {
		ok, unsupported := inPlaceSupport(run, tc.nodes)
		if ok != tc.ok || !strings.HasPrefix(strings.Join(unsupported, "; "), tc.names) || (tc.names == "") != (len(unsupported) == 0) {
			t.Errorf("%s: ok %v unsupported %q; want %v and %q...", name, ok, unsupported, tc.ok, tc.names)
		}
	}
	// A role sent to other nodes (spec.roles) makes those nodes count too.
	withPS := run.DeepCopy()
	withPS.Spec.Roles = []v1alpha1.RoleTemplate{{Name: "ps", NodeSelector: map[string]string{"pool": "cpu"}}}
	nodes := []corev1.Node{inPlaceNode("a", true, corev1.ConditionTrue, gpu), inPlaceNode("cpu", false, "", map[string]string{"pool": "cpu"})}
	if ok, unsupported := inPlaceSupport(withPS, nodes); ok || len(unsupported) != 1 || !strings.HasPrefix(unsupported[0], "cpu (") {
		t.Errorf("a ps role on CPU nodes that cannot: ok %v unsupported %q; want false and the cpu node", ok, unsupported)
	}
}

func inPlacePod(index, attemptLabel, node string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "w-" + index,
			Labels:      map[string]string{v1alpha1.LabelAttempt: attemptLabel},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: index},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// TestMovedIndexes: an index moves when its pod cannot restart where it is (ended, being
// deleted, on an excluded node or one that cannot restart it in place) or has no pod.
func TestMovedIndexes(t *testing.T) {
	now := metav1.Now()
	workers := []*corev1.Pod{
		inPlacePod("0", "1", "healthy"),
		inPlacePod("1", "1", "faulty"),
		inPlacePod("2", "1", "healthy", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		inPlacePod("3", "1", "healthy", func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		inPlacePod("4", "1", "no-agent"),
		inPlacePod("5", "1", ""), // not scheduled yet: it restarts nothing, and waits at its barrier
		// 6 has no pod
		inPlacePod("7", "1", "gone-node"),
	}
	nodes := map[string]exitclass.NodeFacts{"gone-node": {Gone: true}}
	got := movedIndexes(workers, 8, []string{"faulty"}, nodes, func(n string) bool { return n == "no-agent" })
	if want := []int32{1, 2, 3, 4, 6, 7}; !cmp.Equal(got, want) {
		t.Errorf("moved %v, want %v", got, want)
	}
}

// TestStoppedForBarrier: a pod stopped for attempt n runs no worker of an older attempt.
func TestStoppedForBarrier(t *testing.T) {
	barrier := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer, State: s}}
		}
	}
	worker := func(s corev1.ContainerState) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: s}} }
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	opened := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: "attempt=2"}}
	cases := map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"made for the attempt":                   {inPlacePod("0", "3", "n", barrier(opened), worker(running)), true},
		"worker of attempt 2 runs":               {inPlacePod("0", "1", "n", barrier(opened), worker(running)), false},
		"opened for 2, worker about to start":    {inPlacePod("0", "1", "n", barrier(opened), worker(waiting)), false},
		"back at its barrier":                    {inPlacePod("0", "1", "n", barrier(running), worker(waiting)), true},
		"not started yet":                        {inPlacePod("0", "1", ""), true},
		"barrier running, a worker still listed": {inPlacePod("0", "1", "n", barrier(running), worker(running)), false},
	}
	for name, tc := range cases {
		if got := stoppedForBarrier(tc.pod, 3); got != tc.want {
			t.Errorf("%s: stoppedForBarrier = %v, want %v", name, got, tc.want)
		}
	}
}

// TestSuperseded: in an attempt restarted in place, the pods made before it of the indexes it
// moved (by its record, or because a pod made for it exists) are no workers of it.
func TestSuperseded(t *testing.T) {
	uid := func(p *corev1.Pod, u string) *corev1.Pod { p.UID = types.UID(u); return p }
	current := []*corev1.Pod{
		uid(inPlacePod("0", "1", "up"), "keep-0"),
		uid(inPlacePod("1", "1", "down"), "old-1"), // moved by the record, no new pod yet
		uid(inPlacePod("2", "1", "up"), "old-2"),   // moved since: its new pod exists
		uid(inPlacePod("2", "2", "up"), "new-2"),
	}
	run := &v1alpha1.TrainingRun{Status: v1alpha1.TrainingRunStatus{Attempt: 2, Attempts: []v1alpha1.AttemptRecord{
		{Attempt: 1}, {Attempt: 2, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1, MovedIndexes: []int32{1}},
	}}}
	got := superseded(run, current)
	if len(got) != 2 || !got["old-1"] || !got["old-2"] {
		t.Errorf("superseded %v, want old-1 and old-2", got)
	}
	run.Status.Attempts[1].RestartMode = v1alpha1.RestartModeRecreate
	if got := superseded(run, current); len(got) != 0 {
		t.Errorf("a recreated attempt supersedes %v", got)
	}
}
