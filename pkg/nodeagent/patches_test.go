package nodeagent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func jsonEqual(t *testing.T, want string, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("bad patch %s: %v", got, err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("patch (-want +got):\n%s\ngot %s", diff, got)
	}
}

// applyStrategic applies a strategic merge patch to obj the way the API server does.
func applyStrategic[T any](t *testing.T, obj *T, patch []byte) *T {
	t.Helper()
	orig, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, patch, obj)
	if err != nil {
		t.Fatalf("strategic merge: %v", err)
	}
	out := new(T)
	if err := json.Unmarshal(merged, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPodMarkPatch(t *testing.T) {
	ev := xidEvidence("GPU-a", 79, v1alpha1.CauseGPUFault)
	ev.Detail = "XID 79: GPU has fallen off the bus"
	annotations, err := evidenceAnnotations(ev, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := podMarkPatch("uid-1", infraCondition(ev, t0), annotations)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ev)
	want, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": "uid-1", "annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw)}},
		"status": map[string]any{"conditions": []map[string]any{{
			"type":               "faultline.dev/InfrastructureFault",
			"status":             "True",
			"reason":             "GPUFault",
			"message":            "GPUFault on node gpu-7, GPU 3 (GPU-a): XID 79: GPU has fallen off the bus [nvml-event, detected 2026-03-01T12:00:00.123456789Z]",
			"lastTransitionTime": "2026-03-01T12:00:00Z",
		}}},
	})
	jsonEqual(t, string(want), data)
	if diff := cmp.Diff(&ev, v1alpha1.EvidenceOf(map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw)})); diff != "" {
		t.Errorf("annotation does not round-trip (-want +got):\n%s", diff)
	}

	// Conditions merge by type: the kubelet's stay, ours is added, and deleting ours leaves
	// the kubelet's alone. Annotations merge by key: others' stay.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "uid-1", Annotations: map[string]string{"other": "x"}},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	marked := applyStrategic(t, pod, data)
	types := map[corev1.PodConditionType]bool{}
	for _, c := range marked.Status.Conditions {
		types[c.Type] = true
	}
	if len(marked.Status.Conditions) != 2 || !types[corev1.PodReady] || !hasInfraCondition(marked, v1alpha1.CauseGPUFault) {
		t.Fatalf("conditions after patch: %+v", marked.Status.Conditions)
	}
	if got := v1alpha1.EvidenceOf(marked.Annotations); got == nil || !cmp.Equal(*got, ev) || marked.Annotations["other"] != "x" {
		t.Fatalf("annotations after patch: %v", marked.Annotations)
	}
	del, err := podMarkPatch("uid-1", infraConditionDelete(), evidenceRemoval())
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, `{
		"metadata": {"uid": "uid-1", "annotations": {"faultline.dev/fault-evidence": null}},
		"status": {"conditions": [{"type": "faultline.dev/InfrastructureFault", "$patch": "delete"}]}
	}`, del)
	withdrawn := applyStrategic(t, marked, del)
	if diff := cmp.Diff(pod, withdrawn); diff != "" {
		t.Errorf("pod after withdrawal (-want +got):\n%s", diff)
	}
}

func TestPodMarkPatchLeavesWhatItDoesNotCarry(t *testing.T) {
	ev := ShutdownEvidence("gpu-7", t0)
	annotations, err := evidenceAnnotations(ev, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := podMarkPatch("uid-1", nil, annotations)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(ev)
	want, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": "uid-1", "annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw)},
	}})
	jsonEqual(t, string(want), data)

	data, err = podMarkPatch("uid-1", infraCondition(ev, t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["metadata"]["annotations"]; ok {
		t.Errorf("condition-only patch touches annotations: %s", data)
	}
}

func TestNodePatches(t *testing.T) {
	data, err := nodeGPUConditionPatch(corev1.ConditionFalse, "Xid79", "GPU 3 fell off the bus", t0)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, `{"status": {"conditions": [{
		"type": "faultline.dev/GPUHealthy", "status": "False", "reason": "Xid79", "message": "GPU 3 fell off the bus",
		"lastHeartbeatTime": "2026-03-01T12:00:00Z", "lastTransitionTime": "2026-03-01T12:00:00Z"
	}]}}`, data)
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	got := applyStrategic(t, node, data)
	if reason, since, unhealthy := gpuUnhealthy(got); len(got.Status.Conditions) != 2 || !unhealthy || reason != "Xid79" || !since.Equal(t0.Truncate(time.Second)) {
		t.Errorf("node conditions after patch: %+v", got.Status.Conditions)
	}

	at := "2026-03-01T12:00:00.123456789Z"
	data, err = nodeAnnotationPatch(v1alpha1.AnnotationShutdownDetectedAt, &at)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, `{"metadata": {"annotations": {"faultline.dev/shutdown-detected-at": "2026-03-01T12:00:00.123456789Z"}}}`, data)
	data, err = nodeAnnotationPatch(v1alpha1.AnnotationShutdownDetectedAt, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, `{"metadata": {"annotations": {"faultline.dev/shutdown-detected-at": null}}}`, data)
}

func TestNodeTaintPatch(t *testing.T) {
	added := metav1.NewTime(t0)
	taint := corev1.Taint{Key: v1alpha1.TaintGPUUnhealthy, Value: "Xid79", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}},
	}
	data, needed, err := nodeTaintPatch(node, taint)
	if err != nil || !needed {
		t.Fatalf("needed %v, err %v", needed, err)
	}
	jsonEqual(t, `{"metadata": {"resourceVersion": "42"}, "spec": {"taints": [
		{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
		{"key": "faultline.dev/gpu-unhealthy", "value": "Xid79", "effect": "NoSchedule", "timeAdded": "2026-03-01T12:00:00Z"}
	]}}`, data)
	if len(node.Spec.Taints) != 1 {
		t.Error("the node's own taints were modified")
	}

	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintGPUUnhealthy, Value: "Xid48", Effect: corev1.TaintEffectNoSchedule})
	if _, needed, _ := nodeTaintPatch(node, taint); needed {
		t.Error("taint added twice")
	}
}
