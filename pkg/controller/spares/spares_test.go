package spares

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// pod is a Running pod of run llm on node, waiting at its barrier: a spare of slot when
// index < 0, else holding index (made as a spare when slot >= 0).
func pod(name string, slot, index int, node string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), Labels: map[string]string{v1alpha1.LabelRun: "llm"}, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0." + name[len(name)-1:],
			ContainerStatuses: []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	if slot >= 0 {
		p.Labels[v1alpha1.LabelSpare] = string(rune('0' + slot))
	}
	if index >= 0 {
		p.Labels[batchv1.JobCompletionIndexAnnotation] = string(rune('0' + index))
		p.Annotations[batchv1.JobCompletionIndexAnnotation] = string(rune('0' + index))
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func run(spares int32) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "run-uid"},
		Spec: v1alpha1.TrainingRunSpec{Workers: 4, Spares: spares}}
}

var healthy = map[string]exitclass.NodeFacts{"a": {}, "b": {}, "c": {}}

// TestKeepMakesTheMissingSlotsOnceTheAttemptRuns: a slot with a live spare is kept; one whose
// spare ended, or none, is made, and the ended spare goes; nothing is due before the
// attempt runs.
func TestKeepMakesTheMissingSlotsOnceTheAttemptRuns(t *testing.T) {
	r := run(3)
	ended := pod("s1", 1, -1, "b", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	slots, gone := Keep(r, []*corev1.Pod{pod("s0", 0, -1, "a"), ended}, healthy)
	if !slices.Equal(slots, []int{1, 2}) || len(gone) != 1 || gone[0] != ended {
		t.Errorf("Keep: slots %v, ended %v; want slots 1 and 2 made, s1 gone", slots, gone)
	}
	deleting := pod("s2", 2, -1, "c", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} })
	if slots, _ := Keep(r, []*corev1.Pod{pod("s0", 0, -1, "a"), pod("s1", 1, -1, "b"), deleting}, healthy); len(slots) != 0 {
		t.Errorf("Keep with slot 2's spare still going: slots %v, want none until it is gone", slots)
	}
	r.Status.Attempt = 2
	r.Status.Attempts = []v1alpha1.AttemptRecord{{Attempt: 1}, {Attempt: 2}}
	if Due(r) {
		t.Error("spares due before attempt 2 runs")
	}
	r.Status.Attempts[1].RunningTime = &metav1.Time{Time: time.Now()}
	if !Due(r) {
		t.Error("spares not due once attempt 2 runs")
	}
}

// TestAssignTakesOnlyReadySpares: an index without a pod goes to a spare that waits, Running,
// on a healthy node the attempt does not keep off, in slot order; never to one that holds an
// index, is going, or whose hand-over the cache does not show yet.
func TestAssignTakesOnlyReadySpares(t *testing.T) {
	nodes := map[string]exitclass.NodeFacts{"a": {}, "b": {}, "c": {}, "down": {NotReady: true}, "ending": {ShutdownDetectedAt: &time.Time{}}, "xid": {GPUUnhealthyReason: "Xid79"}}
	spares := []*corev1.Pod{
		pod("s5", 5, -1, "c"),
		pod("s1", 1, -1, "a"),
		pod("s2", 2, -1, "excluded"),
		pod("s3", 3, -1, "down"),
		pod("s4", 4, -1, "ending"),
		pod("s6", 6, -1, "a", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }),
		pod("s7", 7, -1, "a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		pod("s8", 8, 2, "a"),  // holds index 2
		pod("s9", 9, -1, "b"), // handed a moment ago
		pod("s0", 0, -1, "xid"),
	}
	got := Assign([]int{1, 3, 0}, spares, nodes, []string{"excluded"}, func(p *corev1.Pod) bool { return p.Name == "s9" })
	if len(got) != 2 || got[0].Pod.Name != "s1" || got[0].Index != 1 || got[1].Pod.Name != "s5" || got[1].Index != 3 {
		t.Errorf("Assign: %v; want index 1 to s1, 3 to s5, index 0 left for a new pod", got)
	}
}

// TestEndpointsNameTheIndexesSparesHold: the slice names each index a spare holds at the
// spare's IP, with the index's hostname under the run's Service, and nothing else.
func TestEndpointsNameTheIndexesSparesHold(t *testing.T) {
	r := run(2)
	workers := []*corev1.Pod{
		pod("w0", -1, 0, "a"), // made with its index: its hostname serves it
		pod("s3", 0, 3, "b"),  // a spare that holds index 3
		pod("s4", 1, -1, "c"), // a spare without an index
		pod("s7", 1, 1, "c", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }),
	}
	s := Endpoints(r, workers)
	owner := s.OwnerReferences
	if *s.Name != "llm-spares" || s.Labels[discoveryv1.LabelServiceName] != "llm" || s.Labels[discoveryv1.LabelManagedBy] != v1alpha1.EndpointSliceManagedBy ||
		len(owner) != 1 || *owner[0].Name != "llm" || !*owner[0].Controller || *s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("slice %s labels %v owners %v type %s", *s.Name, s.Labels, owner, *s.AddressType)
	}
	if len(s.Endpoints) != 1 || *s.Endpoints[0].Hostname != "llm-3" || s.Endpoints[0].Addresses[0] != "10.0.0.3" || *s.Endpoints[0].TargetRef.Name != "s3" {
		t.Errorf("endpoints %+v; want llm-3 at s3's IP alone", s.Endpoints)
	}
	if k := Key(s); k != "IPv4 llm-3=10.0.0.3@uid-s3" {
		t.Errorf("Key = %q", k)
	}
	if Key(Endpoints(r, workers[:1])) == Key(s) {
		t.Error("two slices that say different things have one key")
	}
}
