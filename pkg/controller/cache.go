package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// podsByRun indexes the cached pods by the name of their run. Every reconcile lists its
// run's pods; by label, that List would test every cached pod of the namespace (10,000 in
// the steady-state benchmark) once per reconcile, and it is on the decision's path.
const podsByRun = "faultline-pods-by-run"

// runOfPod is podsByRun's index function.
func runOfPod(o client.Object) []string {
	if name := o.GetLabels()[v1alpha1.LabelRun]; name != "" {
		return []string{name}
	}
	return nil
}

// indexPods registers podsByRun on the cache's pods.
func indexPods(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, podsByRun, runOfPod)
}
