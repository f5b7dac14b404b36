package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// MarkInPlaceReady writes the node condition InPlaceReady: whether this agent reached the
// node's container runtime and so can restart the node's pods in place. The controller
// restarts a run in place only on nodes that say True (docs/in-place-restart.md, "Modes").
// The agent writes it when it starts, and only a change: an agent restarted with the same
// answer costs no write.
func (w *Writer) MarkInPlaceReady(ctx context.Context, ready bool, reason, message string, at time.Time) error {
	node, err := w.getNode(ctx)
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionInPlaceReady && c.Status == status && c.Reason == reason && c.Message == message {
			return nil
		}
	}
	data, err := nodeConditionPatch(v1alpha1.NodeConditionInPlaceReady, status, reason, message, at)
	if err != nil {
		return err
	}
	if err := w.patchNode(ctx, targetNodeCondition, reason, types.StrategicMergePatchType, data, "status"); err != nil {
		return err
	}
	w.log.Info("wrote the node's in-place readiness", "condition", v1alpha1.NodeConditionInPlaceReady, "status", status, "reason", reason, "message", message)
	return nil
}
