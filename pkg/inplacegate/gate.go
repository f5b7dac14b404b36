// Package inplacegate is the controller's half of a gang restart in place
// (docs/in-place-restart.md), as pure decisions: which nodes can restart a pod in place now,
// which indexes move to new pods, whether a pod has stopped every worker of an older attempt,
// and what the gang's barrier waits for, until when, and what happens when a wait runs out.
// The reconciler (pkg/controller) reads the cluster, asks, and acts.
//
// The invariant it keeps: one attempt at a time. No worker of attempt n runs before every
// worker of every older attempt of the gang has stopped, by the runtime's word (the pod's
// status as the kubelet reports it: the barrier back to waiting, no worker container
// running), never by a label; and an index that moves has its old pod gone from the API
// before the barrier opens for anyone.
//
// Every wait has an end derived from what it waits for and a fallback: a worker that does
// not stop within its pod's grace period and a margin, or whose node agent has gone silent,
// moves its index to a new pod elsewhere; a barrier that does not open within a margin of
// the gang's go signal moves its index too; what faultline cannot act on (a pod on an
// unreachable node, one stuck terminating) is named in the run's Stalled condition.
package inplacegate

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// Heartbeats give the heartbeat of a node's agent (package agentlease), nil for none.
type Heartbeats func(node string) *exitclass.Heartbeat

// Support says whether the nodes a run's gang may run on can restart its pods in place now,
// and names those that cannot. Pure: nodes are the cluster's, heartbeats their agents'.
//
// The nodes considered are those the template's nodeSelector selects, and each role's
// (spec.roles); their affinity and tolerations are the scheduler's business: a stricter
// placement only narrows this set. A node can when NodeCannot says nothing.
func Support(run *v1alpha1.TrainingRun, nodes []corev1.Node, hb Heartbeats, now time.Time) (ok bool, unsupported []string) {
	return everyNode(run, nodes, func(n *corev1.Node) string { return NodeCannot(n, hb(n.Name), now) })
}

// everyNode says whether cannot says nothing of every node the run may use (there being
// one), and names those it says something of, with why.
func everyNode(run *v1alpha1.TrainingRun, nodes []corev1.Node, cannot func(*corev1.Node) string) (ok bool, unable []string) {
	considered := consideredNodes(run, nodes)
	for _, n := range considered {
		if why := cannot(n); why != "" {
			unable = append(unable, n.Name+" ("+why+")")
		}
	}
	return len(considered) > 0 && len(unable) == 0, unable
}

// consideredNodes are the schedulable nodes of nodes that the run's template, or one of its
// roles, selects.
func consideredNodes(run *v1alpha1.TrainingRun, nodes []corev1.Node) []*corev1.Node {
	sels := []labels.Selector{labels.SelectorFromSet(run.Spec.Template.Spec.NodeSelector)}
	for _, role := range run.Spec.Roles {
		if len(role.NodeSelector) > 0 {
			set := maps.Clone(run.Spec.Template.Spec.NodeSelector)
			if set == nil {
				set = map[string]string{}
			}
			maps.Copy(set, role.NodeSelector)
			sels = append(sels, labels.SelectorFromSet(set))
		}
	}
	var out []*corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if !n.Spec.Unschedulable && slices.ContainsFunc(sels, func(sel labels.Selector) bool { return sel.Matches(labels.Set(n.Labels)) }) {
			out = append(out, n)
		}
	}
	return out
}

// BarrierInWorker says whether the run's pods may have their barrier in the worker container
// (an image volume of the barrier's image): every node the run may use mounts image volumes
// (ImageVolumesCannot says nothing), and names those that cannot. Pure.
func BarrierInWorker(run *v1alpha1.TrainingRun, nodes []corev1.Node) (ok bool, cannot []string) {
	return everyNode(run, nodes, ImageVolumesCannot)
}

// imageVolumeRuntimes are the container runtimes that mount image volumes, from the version
// that first did: containerd 2.1, CRI-O 1.31 (KEP-4639). The kubelet mounts them from v1.35
// by default (GA and locked on in v1.36), older than any kubelet that declares
// RestartAllContainersOnContainerExits with its defaults.
var imageVolumeRuntimes = map[string]*utilversion.Version{
	"containerd": utilversion.MustParseGeneric("2.1.0"),
	"cri-o":      utilversion.MustParseGeneric("1.31.0"),
}

// ImageVolumesCannot says why node n's container runtime cannot mount image volumes, "" when
// it can, as its kubelet reports the runtime (status.nodeInfo.containerRuntimeVersion,
// "<runtime>://<version>"): no API declares the capability, so a runtime not known to, or a
// version that does not parse, counts as unable, and the run keeps the init container.
func ImageVolumesCannot(n *corev1.Node) string {
	rv := n.Status.NodeInfo.ContainerRuntimeVersion
	name, ver, _ := strings.Cut(rv, "://")
	least, known := imageVolumeRuntimes[name]
	if !known {
		return fmt.Sprintf("its container runtime %q is not one known to mount image volumes (containerd 2.1+, CRI-O 1.31+)", rv)
	}
	v, err := utilversion.ParseGeneric(ver)
	if err != nil || v.LessThan(least) {
		return fmt.Sprintf("its container runtime %s mounts no image volumes (%s %s or later)", rv, name, least)
	}
	return ""
}

// NodeCannot says why node n cannot restart a pod in place now, "" when it can: its kubelet
// declares RestartAllContainersOnContainerExits (without it the scheduler keeps a pod with
// the rule off the node), its agent reports InPlaceReady (it holds a working connection to
// the node's container runtime), and that agent is there now: its heartbeat is alive. An
// agent that died or was evicted leaves InPlaceReady True behind; its heartbeat expires
// within agentlease.Duration, and the node then stops counting as capable.
func NodeCannot(n *corev1.Node, hb *exitclass.Heartbeat, now time.Time) string {
	if !slices.Contains(n.Status.DeclaredFeatures, v1alpha1.FeatureRestartAllContainers) {
		return "its kubelet does not declare " + v1alpha1.FeatureRestartAllContainers
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionInPlaceReady {
			if c.Status != corev1.ConditionTrue {
				return "its node agent is not ready: " + c.Message
			}
			ready = true
		}
	}
	switch {
	case !ready:
		return "its node agent does not report " + v1alpha1.NodeConditionInPlaceReady
	case hb == nil:
		return "its node agent has no heartbeat (Lease " + agentlease.Namespace + "/" + agentlease.Name(n.Name) + ")"
	case !agentlease.Alive(hb, now):
		return "its node agent is silent: its heartbeat expired at " + hb.ExpiresAt().UTC().Format(time.RFC3339)
	}
	return ""
}

// MovedIndexes are the indexes of workers (the current Job's pods) that cannot restart in
// place at the next attempt: their pod has ended, is being deleted, is on an excluded node,
// or on a node that cannot restart it in place now; and the indexes without a pod. Pure.
func MovedIndexes(workers []*corev1.Pod, n int32, excluded []string, nodes map[string]exitclass.NodeFacts, cannot func(node string) bool) []int32 {
	have := make([]bool, n)
	var moved []int32
	for _, p := range workers {
		i, ok := attempt.Index(p)
		if !ok || i >= int(n) {
			continue
		}
		have[i] = true
		node := p.Spec.NodeName
		if p.DeletionTimestamp != nil || exitclass.Gone(p, nodes) || node != "" && (slices.Contains(excluded, node) || cannot(node)) {
			moved = append(moved, int32(i))
		}
	}
	for i, h := range have {
		if !h {
			moved = append(moved, int32(i))
		}
	}
	slices.Sort(moved)
	return slices.Compact(moved)
}

// Stopped reports whether pod runs no worker of an attempt before n (attempt.Barrier.Stopped).
// Pure.
func Stopped(p *corev1.Pod, n int32) bool { return attempt.BarrierOf(p).Stopped(n) }

// OpenedFor reports whether pod's barrier has opened for attempt n (or later): its workers
// run attempt n. Pure.
func OpenedFor(p *corev1.Pod, n int32) bool { return attempt.BarrierOf(p).OpenedFor(n) }

// pullFailures are the kubelet's reasons of a container waiting on an image it cannot pull
// (k8s.io/kubernetes pkg/kubelet/images: ErrImagePullBackOff, ErrInvalidImageName,
// ErrImageNeverPull; ErrImagePull is the first failure, retried at once, and may be a blip).
var pullFailures = []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

// BarrierUnpullable is the first pod of pods whose barrier's image cannot be pulled on its
// node, and the kubelet's words; nil if none. A barrier in the worker container is an image
// volume of the barrier's image: the kubelet reports its pull on the container that mounts
// it (k8s.io/kubernetes v1.36, kuberuntime: the volume's pull result fails the container's
// start), where the worker's own image fails alike; its message names the image. Pure.
func BarrierUnpullable(pods []*corev1.Pod) (*corev1.Pod, *corev1.ContainerStateWaiting) {
	for _, p := range pods {
		b := attempt.BarrierOf(p)
		if b.Status == nil || b.Status.State.Waiting == nil || !slices.Contains(pullFailures, b.Status.State.Waiting.Reason) {
			continue
		}
		// The worker's own image fails the same way there: the kubelet's message names the
		// image it could not pull.
		if w := b.Status.State.Waiting; b.Place != attempt.BarrierInWorker || strings.Contains(w.Message, attempt.BarrierImage(&p.Spec)) {
			return p, w
		}
	}
	return nil, nil
}

// RecordBehind returns a pod of pods whose barrier is its worker's entrypoint and whose
// record the API server has a later one of (at, by the pod's UID: its own record or its
// node's heartbeat's, as read from the API server itself), nil if none. The gang's barrier
// opens only when none is: the cache, read a moment after an agent recorded an open (it
// records, then opens), would show that pod's container waiting at its barrier, and count as
// stopped a worker that runs an older attempt.
func RecordBehind(pods []*corev1.Pod, at map[types.UID]*v1alpha1.BarrierRecord) *corev1.Pod {
	for _, p := range pods {
		if _, place := attempt.BarrierContainer(&p.Spec); place == attempt.BarrierInWorker && attempt.LaterRecord(at[p.UID], attempt.BarrierRecord(p)) {
			return p
		}
	}
	return nil
}
