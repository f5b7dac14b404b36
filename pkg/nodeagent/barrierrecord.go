package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

var _ inplace.BarrierRecorder = &Writer{}

// RecordBarrier writes rec onto pod, a pod of this node whose barrier is its worker
// container's entrypoint, as v1alpha1.AnnotationBarrierRecord, before the agent opens that
// barrier: one pods/status patch whose preconditions are the pod's UID and the
// resourceVersion the agent read it at, so that the record replaces only the one the agent
// decided on (a conflict is returned, not retried: the agent's loop reads the pod again).
// The admission policy lets the agent write it on its own node's pods only, and nobody else
// (deploy/admission).
func (w *Writer) RecordBarrier(ctx context.Context, pod *corev1.Pod, rec v1alpha1.BarrierRecord) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	data, err := json.Marshal(obj{"metadata": obj{
		"uid": pod.UID, "resourceVersion": pod.ResourceVersion,
		"annotations": obj{v1alpha1.AnnotationBarrierRecord: string(raw)},
	}})
	if err != nil {
		return err
	}
	if err := w.cfg.Client.PatchPodStatus(ctx, pod.Namespace, pod.Name, types.StrategicMergePatchType, data); err != nil {
		w.cfg.Metrics.markFailed(targetPodAnnotation)
		return fmt.Errorf("record the barrier open of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	w.cfg.Metrics.markWritten(targetPodAnnotation, reasonBarrierRecord)
	return nil
}

// reasonBarrierRecord is the reason label of the marks metric for a barrier record.
const reasonBarrierRecord = "BarrierRecord"
