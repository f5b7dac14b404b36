// Package slim is what the TrainingRun controller's cache keeps of the objects it holds.
//
// The cache holds every worker pod of every run and every Node of the cluster, so each field
// kept costs once per pod: at 10,000 pods, a kilobyte per pod is 10 MB. These transforms keep
// what the controller reads and drop the rest before an object is stored. The controller
// never writes a cached pod or Node back whole (pods are patched, with a diff computed
// between two cached copies), so nothing dropped can be lost on the server.
package slim

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Default is every cached object's transform: the controller never reads
// managed fields, and they are often the largest part of an object.
var Default = cache.TransformStripManagedFields()

// Pod keeps of a pod what the controller reads (exitclass, the teardown, the trace): its
// metadata without managed fields; of its spec the node, each container's name and GPUs,
// its toleration of an unreachable node (how long a node may be silent before its workers
// count as lost) and its termination grace period; of its status the phase, reason, message, start, conditions and
// the containers' states. The rest grows with the gang or the run's history and is read by
// nobody here: the containers' environment carries the framework's rendezvous (TF_CONFIG
// lists every worker, so the cache would grow with the gang's square), the affinity every
// excluded node (up to 1,000 names in each pod), and volumes, probes, commands, images and
// addresses are the kubelet's business (but for where the barrier is: attempt.KeepBarrier,
// and the pod's IP, where a warm spare is reached under the index it takes).
func Pod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return Default(obj)
	}
	p.ManagedFields = nil
	spec := p.Spec
	p.Spec = corev1.PodSpec{
		NodeName:       spec.NodeName,
		InitContainers: slimContainers(spec.InitContainers),
		Containers:     slimContainers(spec.Containers),
		Tolerations:    exitclass.UnreachableTolerations(spec.Tolerations),
		// What its workers are given to stop: a restart in place waits that long for them.
		TerminationGracePeriodSeconds: spec.TerminationGracePeriodSeconds,
	}
	attempt.KeepBarrier(&spec, &p.Spec) // where its barrier is
	p.Status = corev1.PodStatus{
		Phase:     p.Status.Phase,
		Reason:    p.Status.Reason,
		Message:   p.Status.Message,
		StartTime: p.Status.StartTime,
		// A warm spare's address, which the index it takes is published at
		// (controller/spares.Endpoints).
		PodIP:                 p.Status.PodIP,
		Conditions:            p.Status.Conditions,
		InitContainerStatuses: slimContainerStatuses(p.Status.InitContainerStatuses),
		ContainerStatuses:     slimContainerStatuses(p.Status.ContainerStatuses),
	}
	return p, nil
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{
			Limits: gpusOnly(c.Resources.Limits), Requests: gpusOnly(c.Resources.Requests),
		}}
	}
	return out
}

// gpusOnly keeps of a resource list its GPUs, the only resource the controller reads (the
// cpu and memory quantities were 1.4 KB of every cached pod). The list is shared by every
// cached pod that asks for as many GPUs: a map of its own was another 1.3 KB a pod, and
// cached objects are never modified.
func gpusOnly(l corev1.ResourceList) corev1.ResourceList {
	q, ok := l[v1alpha1.ResourceGPU]
	if !ok {
		return nil
	}
	key := q.String()
	if v, ok := gpuLists.Load(key); ok {
		return v.(corev1.ResourceList)
	}
	v, _ := gpuLists.LoadOrStore(key, corev1.ResourceList{v1alpha1.ResourceGPU: q})
	return v.(corev1.ResourceList)
}

// gpuLists are the GPU resource lists the cached pods share, by quantity: as many as there
// are GPU counts per container in the cluster.
var gpuLists sync.Map

func slimContainerStatuses(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, s := range ss {
		out[i] = corev1.ContainerStatus{Name: s.Name, State: s.State, LastTerminationState: s.LastTerminationState,
			Ready: s.Ready, Started: s.Started, RestartCount: s.RestartCount}
	}
	return out
}

// Node keeps what exitclass.FactsOfNode reads (metadata, spec, conditions), the
// features its kubelet declares (whether it restarts pods in place) and its container
// runtime's version (whether it mounts image volumes): a Node's status (images, addresses,
// capacity, the rest of its system info) is most of it, in every Node of the cluster.
func Node(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return Default(obj)
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions, DeclaredFeatures: n.Status.DeclaredFeatures,
		// Whether it mounts image volumes (inplacegate.ImageVolumesCannot).
		NodeInfo: corev1.NodeSystemInfo{ContainerRuntimeVersion: n.Status.NodeInfo.ContainerRuntimeVersion}}
	return n, nil
}
