// Package spares is the TrainingRun reconciler's keeper of warm spares (spec.spares,
// docs/in-place-restart.md#warm-spares): when a slot needs a new spare, which spare takes an
// index that has no pod, and the addresses of the indexes that spares hold. Its functions
// decide; the reconciler writes what they say.
//
// A spare stands in for a pod that would have been made: an index gets one exactly where it
// would get a new pod (the reconciler's createPods, for the indexes without one, only once
// the index's old pod can run nothing: exitclass.Gone), so the in-place restart's invariant,
// one live worker per index, holds as it does for new pods (docs/in-place-restart-proof.md).
package spares

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// Due says whether run's missing spares may be made now: only once its current attempt runs
// (its record's runningTime), so that making a spare never competes with a gang's start or
// restart for the scheduler, the nodes and the API server: a restart that hands indexes to
// spares makes no pod before its attempt runs.
func Due(run *v1alpha1.TrainingRun) bool {
	rec := attempt.Record(run)
	return run.Spec.Spares > 0 && rec != nil && rec.RunningTime != nil && rec.EndTime == nil
}

// Keep says which of run's spare slots (0..spec.spares-1) need a new spare, and which spares
// go: spares are the run's pods made as spares that hold no index (attempt.Spare). A slot is
// kept by a live spare (not ended, not being deleted, its node neither gone nor out of
// service); one that ended goes, and its slot is made again.
func Keep(run *v1alpha1.TrainingRun, spares []*corev1.Pod, nodes map[string]exitclass.NodeFacts) (slots []int, ended []*corev1.Pod) {
	kept := make([]bool, run.Spec.Spares)
	for _, p := range spares {
		slot, err := strconv.Atoi(p.Labels[v1alpha1.LabelSpare])
		switch {
		case p.DeletionTimestamp != nil:
			// Going: its slot waits until it is gone (its name may be the new one's).
			if err == nil && slot >= 0 && slot < len(kept) {
				kept[slot] = true
			}
		case exitclass.Gone(p, nodes) || err != nil || slot < 0 || slot >= len(kept) || kept[slot]:
			ended = append(ended, p)
		default:
			kept[slot] = true
		}
	}
	for s, k := range kept {
		if !k {
			slots = append(slots, s)
		}
	}
	return slots, ended
}

// HandOver is a spare that takes an index.
type HandOver struct {
	Pod   *corev1.Pod
	Index int
}

// Assign gives the indexes of missing, in order, the spares that are ready, in slot order,
// as many as there are: a ready spare waits at its barrier (Running, its container
// running), is not being deleted, and its node is not one the attempt keeps off (excluded),
// nor unhealthy (gone, out of service, not Ready, unreachable, shutting down, cordoned, or
// its GPUs unhealthy), and is not one of skip (spares handed an index that the cache does
// not show yet).
func Assign(missing []int, spares []*corev1.Pod, nodes map[string]exitclass.NodeFacts, excluded []string, skip func(*corev1.Pod) bool) []HandOver {
	ready := slices.DeleteFunc(slices.Clone(spares), func(p *corev1.Pod) bool { return !Ready(p, nodes, excluded) || skip(p) })
	slices.SortFunc(ready, func(a, b *corev1.Pod) int {
		sa, _ := strconv.Atoi(a.Labels[v1alpha1.LabelSpare])
		sb, _ := strconv.Atoi(b.Labels[v1alpha1.LabelSpare])
		return sa - sb
	})
	out := make([]HandOver, 0, min(len(missing), len(ready)))
	for k, i := range missing[:min(len(missing), len(ready))] {
		out = append(out, HandOver{Pod: ready[k], Index: i})
	}
	return out
}

// Ready reports whether spare p can take an index now (Assign).
func Ready(p *corev1.Pod, nodes map[string]exitclass.NodeFacts, excluded []string) bool {
	if !attempt.Spare(p) || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || slices.Contains(excluded, p.Spec.NodeName) {
		return false
	}
	if !slices.ContainsFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.State.Running != nil }) {
		return false
	}
	f, ok := nodes[p.Spec.NodeName]
	return ok && !f.Gone && !f.OutOfService && !f.NotReady && !f.Unreachable && f.ShutdownDetectedAt == nil &&
		!f.Unschedulable && f.DisruptionTaint == "" && f.GPUUnhealthyReason == ""
}

// Endpoints is the EndpointSlice that gives the indexes spares hold their addresses, as the
// controller applies it: the run's headless Service names a pod <run>-<i> from its hostname,
// which a spare made without an index does not have and cannot get (a pod's hostname is
// fixed). Its endpoints are those of the workers made as spares that hold an index and have
// an IP, with the index's hostname; the endpoint slice controller, which manages the
// Service's other slices from its selector, leaves this one alone (its managed-by label),
// and the cluster's DNS answers the index's name from it as from the others. Once an
// index's old pod is gone (the only time a spare takes one), the only endpoint with that
// hostname is the spare's.
func Endpoints(run *v1alpha1.TrainingRun, workers []*corev1.Pod) *discoveryv1ac.EndpointSliceApplyConfiguration {
	held := slices.DeleteFunc(slices.Clone(workers), func(p *corev1.Pod) bool {
		_, ok := attempt.Index(p)
		return !ok || !attempt.MadeAsSpare(p) || p.Status.PodIP == "" || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	slices.SortFunc(held, func(a, b *corev1.Pod) int { return attempt.IndexOrNone(a) - attempt.IndexOrNone(b) })
	addressType := discoveryv1.AddressTypeIPv4
	endpoints := []*discoveryv1ac.EndpointApplyConfiguration{}
	for _, p := range held {
		i, _ := attempt.Index(p)
		if strings.Contains(p.Status.PodIP, ":") {
			addressType = discoveryv1.AddressTypeIPv6
		}
		endpoints = append(endpoints, discoveryv1ac.Endpoint().
			WithAddresses(p.Status.PodIP).
			WithHostname(rendezvous.Hostname(run, i)).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(true)).
			WithNodeName(p.Spec.NodeName).
			WithTargetRef(corev1ac.ObjectReference().WithKind("Pod").WithNamespace(p.Namespace).WithName(p.Name).WithUID(p.UID)))
	}
	return discoveryv1ac.EndpointSlice(SliceName(run), run.Namespace).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: rendezvous.ServiceName(run),
			discoveryv1.LabelManagedBy:   v1alpha1.EndpointSliceManagedBy,
			v1alpha1.LabelRun:            run.Name,
			v1alpha1.LabelRunUID:         string(run.UID),
		}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind(v1alpha1.KindTrainingRun).
			WithName(run.Name).WithUID(run.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithAddressType(addressType).
		WithEndpoints(endpoints...)
}

// Key identifies what s says (its endpoints' names, addresses and pods): equal keys, the
// same slice.
func Key(s *discoveryv1ac.EndpointSliceApplyConfiguration) string {
	var b strings.Builder
	b.WriteString(string(ptr.Deref(s.AddressType, "")))
	for _, e := range s.Endpoints {
		var uid types.UID
		if e.TargetRef != nil {
			uid = ptr.Deref(e.TargetRef.UID, "")
		}
		fmt.Fprintf(&b, " %s=%s@%s", ptr.Deref(e.Hostname, ""), strings.Join(e.Addresses, ","), uid)
	}
	return b.String()
}

// SliceName is the name of run's EndpointSlice of the indexes spares hold.
func SliceName(run *v1alpha1.TrainingRun) string { return run.Name + "-spares" }
