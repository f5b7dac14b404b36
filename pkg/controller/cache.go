package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The cache holds every worker pod of every run and every Node of the cluster, so each field
// kept costs once per pod: at 10,000 pods, a kilobyte per pod is 10 MB. These transforms keep
// what the controller reads and drop the rest before an object is stored. The controller
// never writes a cached pod or Node back whole (pods are patched, with a diff computed
// between two cached copies), so nothing dropped can be lost on the server.

// stripManagedFields is every cached object's transform: the controller never reads
// managed fields, and they are often the largest part of an object.
var stripManagedFields = cache.TransformStripManagedFields()

// slimPod also drops the containers' environment: it carries the framework's rendezvous
// (TF_CONFIG lists every worker of the gang, so its size grows with the gang, and the
// cache's with its square) and the controller reads none of it.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return stripManagedFields(obj)
	}
	p.ManagedFields = nil
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].Env = nil
		}
	}
	return p, nil
}

// slimNode keeps what exitclass.FactsOfNode reads (metadata, spec, conditions): a Node's status
// (images, addresses, capacity, system info) is most of it, in every Node of the cluster.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return stripManagedFields(obj)
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions}
	return n, nil
}

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
