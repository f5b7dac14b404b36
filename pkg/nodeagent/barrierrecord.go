package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
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
	if err := w.patchRecord(ctx, pod, rec); err != nil {
		w.cfg.Metrics.markFailed(targetPodAnnotation)
		return err
	}
	w.cfg.Metrics.markWritten(targetPodAnnotation, reasonBarrierRecord)
	return nil
}

// patchRecord writes rec as pod's barrier record: one pods/status patch whose preconditions
// are the pod's UID and resourceVersion. Its error wraps the API server's (a conflict
// stays one).
func (w *Writer) patchRecord(ctx context.Context, pod *corev1.Pod, rec v1alpha1.BarrierRecord) error {
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
		return fmt.Errorf("write the barrier record of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// reasonBarrierRecord is the reason label of the marks metric for a barrier record.
const reasonBarrierRecord = "BarrierRecord"

// RecordStopped adds to the barrier record on pod that the agent stopped the container it
// names, containerID, for attempt n (v1alpha1.BarrierRecord.StoppedFor): the controller may
// open the gang's barrier on it before the pod's status shows the container's end. The
// record is rewritten only while it names that container for an earlier attempt: one
// pods/status patch against the resourceVersion the record was read at, retried as the
// writer's other writes are (withRetry), each retry on the pod read again from the API
// server and its record checked again (a conflict: the kubelet writes the pod's status as
// the container ends). Nothing is written where the record names another container (a later
// open replaced it), or says so already.
func (w *Writer) RecordStopped(ctx context.Context, pod *corev1.Pod, containerID string, n int, save *v1alpha1.BarrierSave) error {
	return w.amendRecord(ctx, pod, reasonBarrierStopped, func(rec *v1alpha1.BarrierRecord) bool {
		return inplace.AmendStopped(rec, containerID, n, save)
	})
}

// RecordCheckpoint adds to the barrier record on pod that the worker of containerID,
// recorded as opened for attempt n, answered a checkpoint request so (ck); nothing is
// written where the record names another container or attempt, or holds that answer.
func (w *Writer) RecordCheckpoint(ctx context.Context, pod *corev1.Pod, containerID string, n int, ck v1alpha1.BarrierCheckpoint) error {
	return w.amendRecord(ctx, pod, reasonBarrierCheckpoint, func(rec *v1alpha1.BarrierRecord) bool {
		return inplace.AmendCheckpoint(rec, containerID, n, ck)
	})
}

// amendRecord changes the barrier record on pod as change says (it reports whether it
// changed it): one pods/status patch against the resourceVersion the record was read at,
// retried as the writer's other writes are (withRetry), each retry on the pod read again
// from the API server and change asked again (a conflict: the kubelet writes the pod's
// status as its containers change). Nothing is written where change changes nothing.
func (w *Writer) amendRecord(ctx context.Context, pod *corev1.Pod, reason string, change func(*v1alpha1.BarrierRecord) bool) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	ns, name := pod.Namespace, pod.Name
	written := false
	err := withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		if pod == nil {
			var err error
			if pod, err = w.cfg.Client.GetPod(ctx, ns, name); err != nil {
				return fmt.Errorf("read pod %s/%s again to amend its barrier record: %w", ns, name, err)
			}
		}
		rec := attempt.BarrierRecord(pod)
		if rec == nil || !change(rec) {
			return nil
		}
		if err := w.patchRecord(ctx, pod, *rec); err != nil {
			pod = nil
			return err
		}
		written = true
		return nil
	})
	switch {
	case err != nil:
		w.cfg.Metrics.markFailed(targetPodAnnotation)
	case written:
		w.cfg.Metrics.markWritten(targetPodAnnotation, reason)
	}
	return err
}

// reasonBarrierCheckpoint is the reason label of the marks metric for a checkpoint's answer.
const reasonBarrierCheckpoint = "BarrierCheckpoint"

// reasonBarrierStopped is the reason label of the marks metric for a record of a stop.
const reasonBarrierStopped = "BarrierStopped"
