package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels and annotations that drive the project's kwok stages (stages/pod-fail.yaml,
// stages/pod-complete.yaml).
const (
	LabelFail          = "stage.faultline.dev/fail"
	LabelComplete      = "stage.faultline.dev/complete"
	AnnotationExitCode = "stage.faultline.dev/exit-code"
	AnnotationReason   = "stage.faultline.dev/reason"
	AnnotationMessage  = "stage.faultline.dev/message"
	// AnnotationPodReason and AnnotationPodMessage are the pod's status reason and message.
	AnnotationPodReason  = "stage.faultline.dev/pod-reason"
	AnnotationPodMessage = "stage.faultline.dev/pod-message"
	// LabelStopping marks a pod whose kubelet is slow to stop it (HoldStopping): once
	// deleted it stays Running, its containers still stopping (stages/pod-evicted.yaml
	// leaves it alone), held by FinalizerStopping.
	LabelStopping     = "stage.faultline.dev/stopping"
	FinalizerStopping = "stage.faultline.dev/stopping"
)

// HoldStopping makes the kubelet of a simulated pod slow to stop it: once deleted, the pod
// stays, Running, until release is called (as a kubelet still stopping its containers
// would keep it; kwok otherwise ends a deleted pod at once).
func (c *Cluster) HoldStopping(ctx context.Context, namespace, name string) (release func(context.Context) error, err error) {
	patch := func(ctx context.Context, p string) error {
		if _, err := c.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch pod %s/%s: %w", namespace, name, err)
		}
		return nil
	}
	if err := patch(ctx, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"finalizers":[%q]}}`, LabelStopping, FinalizerStopping)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return patch(ctx, fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, FinalizerStopping))
	}, nil
}

// Failure is how a simulated pod's containers terminate.
type Failure struct {
	ExitCode int32
	// Reason is the container's terminated reason (default "Error"; "OOMKilled" for an OOM).
	Reason string
	// Message is the container's termination message.
	Message string
	// PodReason and PodMessage are the pod's status reason and message, as the kubelet writes
	// them when it evicts a pod (PodReason "Evicted"); none if PodReason is empty.
	PodReason, PodMessage string
}

// FailPod makes a Running pod fail as Failure says. kwok applies it within milliseconds.
func (c *Cluster) FailPod(ctx context.Context, namespace, name string, f Failure) error {
	ann := map[string]string{AnnotationExitCode: strconv.Itoa(int(f.ExitCode))}
	if f.Reason != "" {
		ann[AnnotationReason] = f.Reason
	}
	if f.Message != "" {
		ann[AnnotationMessage] = f.Message
	}
	if f.PodReason != "" {
		ann[AnnotationPodReason], ann[AnnotationPodMessage] = f.PodReason, f.PodMessage
	}
	return c.patchPodMeta(ctx, namespace, name, map[string]string{LabelFail: "true"}, ann)
}

// CompletePod makes a Running pod exit 0.
func (c *Cluster) CompletePod(ctx context.Context, namespace, name string) error {
	return c.patchPodMeta(ctx, namespace, name, map[string]string{LabelComplete: "true"}, nil)
}

func (c *Cluster) patchPodMeta(ctx context.Context, namespace, name string, labels, annotations map[string]string) error {
	// A nil map would encode as null, which a merge patch reads as "delete them all".
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch pod %s/%s: %w", namespace, name, err)
	}
	return nil
}
