package nodeagent

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The patches below are pure: they take what to write and return the bytes. Pod patches
// carry metadata.uid, which the API server treats as a precondition (a UID cannot change),
// so evidence never lands on a pod that replaced the one the fault hit under the same name.

type obj = map[string]any

// podMarkPatch is the one write that puts a mark on a pod, or takes it off: a strategic
// merge patch on pods/status with the InfrastructureFault condition (cond; nil leaves the
// conditions alone) and the evidence annotations (annotations; nil leaves them alone).
// The status subresource keeps metadata changes other than ownerReferences and
// deletionTimestamp (podStatusStrategy in k8s.io/kubernetes pkg/registry/core/pod), so
// the condition and its evidence land together: one write per pod instead of two halves
// the time a shutdown takes to mark a full node, and a watcher never sees the condition
// without the evidence that explains it.
func podMarkPatch(uid types.UID, cond obj, annotations obj) ([]byte, error) {
	meta := obj{"uid": uid}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	patch := obj{"metadata": meta}
	if cond != nil {
		// Conditions merge by type: the kubelet's own stay as they are.
		patch["status"] = obj{"conditions": []obj{cond}}
	}
	return json.Marshal(patch)
}

// infraCondition is InfrastructureFault=True for ev, for podMarkPatch.
func infraCondition(ev v1alpha1.FaultEvidence, at time.Time) obj {
	return obj{
		"type":               v1alpha1.PodConditionInfrastructureFault,
		"status":             corev1.ConditionTrue,
		"reason":             string(ev.Cause),
		"message":            conditionMessage(ev),
		"lastTransitionTime": metav1.NewTime(at),
	}
}

// infraConditionDelete removes InfrastructureFault, for podMarkPatch; removing a condition
// that is not there is a no-op.
func infraConditionDelete() obj {
	return obj{"type": v1alpha1.PodConditionInfrastructureFault, "$patch": "delete"}
}

// evidenceAnnotations sets the evidence annotation and, when traceparent is set, the fault
// episode's traceparent with it, for podMarkPatch.
func evidenceAnnotations(ev v1alpha1.FaultEvidence, traceparent string) (obj, error) {
	raw, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	annotations := obj{v1alpha1.AnnotationFaultEvidence: string(raw)}
	if traceparent != "" {
		annotations[v1alpha1.AnnotationTraceparent] = traceparent
	}
	return annotations, nil
}

// evidenceRemoval removes the evidence annotation, for podMarkPatch (null deletes a key in
// a strategic merge patch, as in a merge patch). It leaves the traceparent, which the
// controller reads only next to evidence.
func evidenceRemoval() obj {
	return obj{v1alpha1.AnnotationFaultEvidence: nil}
}

// nodeGPUConditionPatch sets GPUHealthy to status (a strategic merge patch on nodes/status;
// node conditions merge by type, so the kubelet's and other agents' stay).
func nodeGPUConditionPatch(status corev1.ConditionStatus, reason, message string, at time.Time) ([]byte, error) {
	return nodeConditionPatch(v1alpha1.NodeConditionGPUHealthy, status, reason, message, at)
}

// nodeConditionPatch sets the node condition of type typ (as nodeGPUConditionPatch).
func nodeConditionPatch(typ string, status corev1.ConditionStatus, reason, message string, at time.Time) ([]byte, error) {
	t := metav1.NewTime(at)
	return json.Marshal(obj{"status": obj{"conditions": []obj{{
		"type":               typ,
		"status":             status,
		"reason":             reason,
		"message":            message,
		"lastHeartbeatTime":  t,
		"lastTransitionTime": t,
	}}}})
}

// nodeAnnotationPatch sets (or, with nil, removes) one node annotation (JSON merge patch).
func nodeAnnotationPatch(key string, value *string) ([]byte, error) {
	var v any
	if value != nil {
		v = *value
	}
	return json.Marshal(obj{"metadata": obj{"annotations": obj{key: v}}})
}

// nodeTaintPatch adds taint to node's taints; false when a taint with its key and effect is
// already there. Taints are a list without a merge key, replaced whole by any patch, so the
// patch carries the resourceVersion it was computed from: a concurrent change conflicts
// rather than being overwritten.
func nodeTaintPatch(node *corev1.Node, taint corev1.Taint) ([]byte, bool, error) {
	for _, t := range node.Spec.Taints {
		if t.Key == taint.Key && t.Effect == taint.Effect {
			return nil, false, nil
		}
	}
	return taintsPatch(node, append(append([]corev1.Taint(nil), node.Spec.Taints...), taint))
}

// nodeUntaintPatch removes every taint with key from node's taints; false when there is
// none (the same precondition as nodeTaintPatch).
func nodeUntaintPatch(node *corev1.Node, key string) ([]byte, bool, error) {
	var taints []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Key != key {
			taints = append(taints, t)
		}
	}
	if len(taints) == len(node.Spec.Taints) {
		return nil, false, nil
	}
	if taints == nil {
		taints = []corev1.Taint{} // null would not replace the list
	}
	return taintsPatch(node, taints)
}

func taintsPatch(node *corev1.Node, taints []corev1.Taint) ([]byte, bool, error) {
	data, err := json.Marshal(obj{
		"metadata": obj{"resourceVersion": node.ResourceVersion},
		"spec":     obj{"taints": taints},
	})
	return data, err == nil, err
}
