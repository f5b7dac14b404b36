package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// benchQueue is the LocalQueue of the faultline-kueue system's runs.
const benchQueue = "bench"

// gpusPerNode is what every bench node offers (cluster.DefaultNode).
const gpusPerNode = 8

// createBenchQueue makes the queue of the faultline-kueue system: a ResourceFlavor with no
// node labels, a ClusterQueue that holds gpus (every GPU of the cluster: Kueue admits the
// gang at once, and what is measured is its place in the loop, not a wait for quota) and a
// LocalQueue in the bench namespace.
func createBenchQueue(ctx context.Context, dyn dynamic.Interface, gpus int) error {
	objs := []*unstructured.Unstructured{
		kueueObject(kueue.ResourceFlavorGVK, "", "bench", map[string]any{}),
		kueueObject(kueue.ClusterQueueGVK, "", "bench", map[string]any{
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{v1alpha1.ResourceGPU},
				"flavors": []any{map[string]any{
					"name":      "bench",
					"resources": []any{map[string]any{"name": v1alpha1.ResourceGPU, "nominalQuota": int64(gpus)}},
				}},
			}},
		}),
		kueueObject(kueue.LocalQueueGVK, namespace, benchQueue, map[string]any{"clusterQueue": "bench"}),
	}
	for _, u := range objs {
		gvr := u.GroupVersionKind().GroupVersion().WithResource(map[string]string{
			"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
		}[u.GetKind()])
		var err error
		if ns := u.GetNamespace(); ns != "" {
			_, err = dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		} else {
			_, err = dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func kueueObject(gvk schema.GroupVersionKind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
