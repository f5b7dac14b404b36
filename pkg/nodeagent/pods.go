package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

func nodeFieldSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

// selectedListWatch lists and watches only the objects of a field selector: the agent reads
// its own node's pods and its own Node, nothing of the others'.
func selectedListWatch(selector string, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFn(ctx, o)
		},
	}
}

// NodePodInformer returns an informer of the pods on node only: the agent of one node never
// needs, nor should see, the pods of the others. Its indexer is namespaced, for
// corelisters.NewPodLister.
func NodePodInformer(client Kube, node string, resync time.Duration) cache.SharedIndexInformer {
	lw := selectedListWatch(nodeFieldSelector(node),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.ListPods(ctx, o)
		},
		client.WatchPods)
	// The informer streams its initial list (WatchList) unless client says it cannot, as
	// client-go's fake clientset does.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = informer.SetTransform(slimPod) // fails only once the informer runs
	return informer
}

// WatchResets calls reset with the time of every operator's GPU reset of node (the Node's
// v1alpha1.AnnotationGPUResetRequestedAt, newer than the last one seen) until ctx is done. It
// watches the one Node by its name.
func WatchResets(ctx context.Context, client Kube, node string, reset func(time.Time), log *slog.Logger) {
	lw := selectedListWatch(fields.OneTermEqualSelector("metadata.name", node).String(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.ListNodes(ctx, o)
		},
		client.WatchNodes)
	var last time.Time
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, 0, cache.Indexers{})
	seen := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		v, ok := n.Annotations[v1alpha1.AnnotationGPUResetRequestedAt]
		if !ok {
			return
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			log.Warn("GPU reset request with an unreadable time: ignored", "annotation", v1alpha1.AnnotationGPUResetRequestedAt, "value", v, "error", err)
			return
		}
		if at.After(last) {
			last = at
			reset(at)
		}
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	informer.RunWithContext(ctx)
}

// slimPod keeps what the agent reads of a pod: its metadata without managed fields, its node,
// its containers' names and resources (the simulation's GPU allocation), its init
// containers' names, termination grace period and where its barrier is (the in-place
// restarter: whether the pod has a barrier, how long its old workers get to stop), and its
// phase, conditions and container statuses. The informer holds every pod of the node (110 by
// default), and a worker's spec carries its framework's rendezvous, which lists every
// worker of the gang: the rest was most of the agent's heap. The agent never writes a pod
// back whole (its patches name the fields they change), so nothing dropped can be lost.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	slim.ManagedFields = nil
	slim.Spec.NodeName = p.Spec.NodeName
	for _, c := range p.Spec.Containers {
		slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range p.Spec.InitContainers {
		slim.Spec.InitContainers = append(slim.Spec.InitContainers, corev1.Container{Name: c.Name})
	}
	slim.Spec.TerminationGracePeriodSeconds = p.Spec.TerminationGracePeriodSeconds
	attempt.KeepBarrier(&p.Spec, &slim.Spec) // where its barrier is
	slim.Status = corev1.PodStatus{
		Phase:                 p.Status.Phase,
		Conditions:            p.Status.Conditions,
		InitContainerStatuses: p.Status.InitContainerStatuses,
		ContainerStatuses:     p.Status.ContainerStatuses,
	}
	return slim, nil
}

// ForgetDeletedPods makes w forget pods when the informer sees them deleted.
func ForgetDeletedPods(informer cache.SharedIndexInformer, w *Writer, log *slog.Logger) error {
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				log.Debug("unexpected object in pod delete event", "type", fmt.Sprintf("%T", obj))
				return
			}
			w.Forget(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, pod.UID)
		},
	})
	return err
}
