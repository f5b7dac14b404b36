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
// reason as well as for the second. It reads the node each time (the Agent's repeat window
// keeps a storm's repeats away), so that a condition an operator cleared is set again by
// the next fault.
func (w *Writer) MarkGPUUnhealthy(ctx context.Context, reason, message string, at time.Time) error {
	node, err := w.getNode(ctx)
	if err != nil {
		return err
	}
	if _, _, unhealthy := gpuUnhealthy(node); !unhealthy {
		data, err := nodeGPUConditionPatch(corev1.ConditionFalse, reason, message, at)
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
	return nil
}

// MarkGPUHealthy sets GPUHealthy=True and takes faultline's taint off, where the node is
// unhealthy (for a reason, since a time) that gone says is over; it reports whether it
// changed anything.
func (w *Writer) MarkGPUHealthy(ctx context.Context, gone func(reason string, since time.Time) bool, message string, at time.Time) (bool, error) {
	node, err := w.getNode(ctx)
	if err != nil {
		return false, err
	}
	reason, since, unhealthy := gpuUnhealthy(node)
	if !unhealthy || !gone(reason, since) {
		return false, nil
	}
	data, err := nodeGPUConditionPatch(corev1.ConditionTrue, v1alpha1.GPUReasonHealthy, message, at)
	if err != nil {
		return false, err
	}
	if err := w.patchNode(ctx, targetNodeCondition, v1alpha1.GPUReasonHealthy, types.StrategicMergePatchType, data, "status"); err != nil {
		return false, err
	}
	if err := w.untaint(ctx, node); err != nil {
		return true, err
	}
	w.log.Info("marked node GPUs healthy again", "was", reason, "message", message)
	return true, nil
}

// untaint removes v1alpha1.TaintGPUUnhealthy, re-reading the node when a concurrent change
// conflicts.
func (w *Writer) untaint(ctx context.Context, node *corev1.Node) error {
	first := true
	return withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		if !first {
			var err error
			if node, err = w.cfg.Client.GetNode(ctx, w.cfg.Node); err != nil {
				return err
			}
		}
		first = false
		data, needed, err := nodeUntaintPatch(node, v1alpha1.TaintGPUUnhealthy)
		if err != nil || !needed {
			return err
		}
		return w.cfg.Client.PatchNode(ctx, w.cfg.Node, types.MergePatchType, data)
	})
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

// gpuUnhealthy reports whether the node has GPUHealthy=False, its reason and since when.
func gpuUnhealthy(node *corev1.Node) (string, time.Time, bool) {
	for _, c := range node.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionGPUHealthy && c.Status == corev1.ConditionFalse {
			return c.Reason, c.LastTransitionTime.Time, true
		}
	}
	return "", time.Time{}, false
}
