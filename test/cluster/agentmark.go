package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// MarkAsAgent writes onto pod what the node agent of its node writes, in the one pods/status
// patch it uses: the evidence annotation (ev, for the pod's node and now unless ev says
// otherwise) and, for an infrastructure cause, the InfrastructureFault condition. The
// scenarios on kwok nodes play the agent so; test/e2e/agent and the real nodes run the real
// one.
func (c *Cluster) MarkAsAgent(ctx context.Context, pod *corev1.Pod, ev v1alpha1.FaultEvidence) error {
	if ev.Node == "" {
		ev.Node = pod.Spec.NodeName
	}
	if ev.DetectedAt == "" {
		ev.DetectedAt = time.Now().UTC().Format(time.RFC3339Nano)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	body := map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationFaultEvidence: string(raw)}}}
	if ev.Cause.Class() == v1alpha1.ClassInfrastructure {
		body["status"] = map[string]any{"conditions": []corev1.PodCondition{{
			Type:               v1alpha1.PodConditionInfrastructureFault,
			Status:             corev1.ConditionTrue,
			Reason:             string(ev.Cause),
			Message:            "test: " + ev.Detail,
			LastTransitionTime: metav1.Now(),
		}}}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("mark pod %s/%s as its node agent: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
