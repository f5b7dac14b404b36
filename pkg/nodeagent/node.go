package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// MarkGPUUnhealthy sets the node condition GPUHealthy=False and, when configured, the
// NoSchedule taint. The first fatal fault's reason stays: a node is drained for the first
// reason as well as for the second, and rewriting the condition on every XID of a storm
// would only load the API server.
func (w *Writer) MarkGPUUnhealthy(ctx context.Context, reason, message string, at time.Time) error {
	w.mu.Lock()
	done := w.nodeGPU
	w.mu.Unlock()
	if done {
		return nil
	}
	node, err := w.getNode(ctx)
	if err != nil {
		return err
	}
	if !gpuUnhealthy(node) {
		data, err := nodeGPUConditionPatch(reason, message, at)
		if err != nil {
			return err
		}
		if err := w.patchNode(ctx, targetNodeCondition, reason, types.StrategicMergePatchType, data, "status"); err != nil {
			return err
		}
		w.log.Warn("marked node GPUs unhealthy", "reason", reason, "message", message)
	}
	if w.cfg.TaintUnhealthyGPU {
		if err := w.taint(ctx, node, reason, at); err != nil {
			return err
		}
	}
	w.mu.Lock()
	w.nodeGPU = true
	w.mu.Unlock()
	return nil
}

// taint adds v1alpha1.TaintGPUUnhealthy, re-reading the node when a concurrent change conflicts.
func (w *Writer) taint(ctx context.Context, node *corev1.Node, reason string, at time.Time) error {
	added := metav1.NewTime(at)
	taint := corev1.Taint{Key: v1alpha1.TaintGPUUnhealthy, Value: reason, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &added}
	first := true
	err := withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		if !first {
			var err error
			if node, err = w.cfg.Client.GetNode(ctx, w.cfg.Node); err != nil {
				return err
			}
		}
		first = false
		data, needed, err := nodeTaintPatch(node, taint)
		if err != nil || !needed {
			return err
		}
		return w.cfg.Client.PatchNode(ctx, w.cfg.Node, types.MergePatchType, data)
	})
	if err != nil {
		w.cfg.Metrics.markFailed(targetNodeTaint)
		return fmt.Errorf("taint node %s: %w", w.cfg.Node, err)
	}
	w.cfg.Metrics.markWritten(targetNodeTaint, reason)
	return nil
}

// AnnotateShutdown records on the node when logind announced the shutdown.
func (w *Writer) AnnotateShutdown(ctx context.Context, at time.Time) error {
	v := formatTime(at)
	data, err := nodeAnnotationPatch(v1alpha1.AnnotationShutdownDetectedAt, &v)
	if err != nil {
		return err
	}
	return w.patchNode(ctx, targetNodeAnnotation, string(v1alpha1.CauseNodeShutdown), types.MergePatchType, data)
}

// ClearShutdown removes the shutdown annotation: the shutdown was cancelled, or the agent
// is starting on a node that is up again. A stale announcement would blame every later
// failure on this node on a shutdown.
func (w *Writer) ClearShutdown(ctx context.Context) error {
	node, err := w.getNode(ctx)
	if err != nil {
		return err
	}
	if _, ok := node.Annotations[v1alpha1.AnnotationShutdownDetectedAt]; !ok {
		return nil
	}
	data, err := nodeAnnotationPatch(v1alpha1.AnnotationShutdownDetectedAt, nil)
	if err != nil {
		return err
	}
	return w.patchNode(ctx, targetNodeAnnotation, "cleared", types.MergePatchType, data)
}

func (w *Writer) getNode(ctx context.Context) (*corev1.Node, error) {
	var node *corev1.Node
	err := withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		var err error
		node, err = w.cfg.Client.GetNode(ctx, w.cfg.Node)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", w.cfg.Node, err)
	}
	return node, nil
}

func (w *Writer) patchNode(ctx context.Context, target, label string, pt types.PatchType, data []byte, subresources ...string) error {
	err := withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		return w.cfg.Client.PatchNode(ctx, w.cfg.Node, pt, data, subresources...)
	})
	if err != nil {
		w.cfg.Metrics.markFailed(target)
		return fmt.Errorf("write %s to node %s: %w", target, w.cfg.Node, err)
	}
	w.cfg.Metrics.markWritten(target, label)
	return nil
}

func gpuUnhealthy(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionGPUHealthy && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
