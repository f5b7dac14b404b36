package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// AnnotationKwokNode marks a Node that kwok simulates.
const AnnotationKwokNode = "kwok.x-k8s.io/node"

// NodeSpec describes the fake GPU nodes. Zero fields take DefaultNode's values.
type NodeSpec struct {
	GPUs   int
	CPU    string
	Memory string
	// Pods is the node's pod capacity (kubelet's default is 110).
	Pods int
	// Zones spreads nodes round-robin over this many zones (topology.kubernetes.io/zone).
	Zones int
}

// DefaultNode is an 8-GPU node as in a DGX-class machine.
var DefaultNode = NodeSpec{GPUs: 8, CPU: "96", Memory: "1Ti", Pods: 110, Zones: 2}

func (s NodeSpec) withDefaults() NodeSpec {
	if s.GPUs == 0 {
		s.GPUs = DefaultNode.GPUs
	}
	if s.CPU == "" {
		s.CPU = DefaultNode.CPU
	}
	if s.Memory == "" {
		s.Memory = DefaultNode.Memory
	}
	if s.Pods == 0 {
		s.Pods = DefaultNode.Pods
	}
	if s.Zones == 0 {
		s.Zones = DefaultNode.Zones
	}
	return s
}

// NodeName is the name of the i-th fake node.
func NodeName(i int) string { return fmt.Sprintf("gpu-node-%d", i) }

// AddNodes creates fake nodes NodeName(first) … NodeName(first+n-1) and waits until all are Ready.
func (c *Cluster) AddNodes(ctx context.Context, spec NodeSpec, first, n int) error {
	spec = spec.withDefaults()
	for i := first; i < first+n; i++ {
		node := makeNode(NodeName(i), spec, i)
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	// kwok makes a node Ready within a second; a node still not Ready two minutes after the
	// one before it was will not be, and the caller should see the logs rather than its own
	// deadline. Per node, not for all: thousands of nodes (the bench's steady state at 50k
	// workers has 6,251) take kwok longer than that on a busy machine.
	for i := first; i < first+n; i++ {
		if err := c.waitNodeReadyWithin(ctx, NodeName(i), 2*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitNodeReadyWithin(ctx context.Context, name string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.WaitNodeReady(ctx, name)
}

func makeNode(name string, spec NodeSpec, i int) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:                        resource.MustParse(spec.CPU),
		corev1.ResourceMemory:                     resource.MustParse(spec.Memory),
		corev1.ResourcePods:                       *resource.NewQuantity(int64(spec.Pods), resource.DecimalSI),
		corev1.ResourceName(v1alpha1.ResourceGPU): *resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{AnnotationKwokNode: "fake"},
			Labels: map[string]string{
				corev1.LabelHostname:           name,
				corev1.LabelTopologyZone:       fmt.Sprintf("zone-%c", 'a'+i%spec.Zones),
				corev1.LabelOSStable:           "linux",
				corev1.LabelArchStable:         "amd64",
				"type":                         "kwok",
				"nvidia.com/gpu.present":       "true",
				corev1.LabelInstanceTypeStable: "fake-gpu-8x",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// WaitNodeReady blocks until the node reports Ready=True.
func (c *Cluster) WaitNodeReady(ctx context.Context, name string) error {
	_, err := c.WaitNode(ctx, name, func(n *corev1.Node) (bool, error) {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	return err
}

// NodeUnhealthy says what keeps a node from being healthy as the API sees it, "" when it is:
// Ready True, not cordoned, none of the taints the control plane puts on a node it does not
// trust (node.kubernetes.io/*: not-ready, unreachable, unschedulable, the pressure taints,
// out-of-service), and its GPUs not marked unhealthy by its agent. A test hands a node to
// the next only so: the node lifecycle controller takes its taints off a few seconds after
// the kubelet's Ready, and a pod scheduled before that would be judged by a blink that is
// over.
func NodeUnhealthy(n *corev1.Node) string {
	var why []string
	ready := false
	for _, c := range n.Status.Conditions {
		switch {
		case c.Type == corev1.NodeReady:
			ready = c.Status == corev1.ConditionTrue
			if !ready {
				why = append(why, fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason))
			}
		case c.Type == v1alpha1.NodeConditionGPUHealthy && c.Status == corev1.ConditionFalse:
			why = append(why, fmt.Sprintf("%s=False (%s)", c.Type, c.Reason))
		}
	}
	if !ready && len(why) == 0 {
		why = append(why, "no Ready condition")
	}
	if n.Spec.Unschedulable {
		why = append(why, "cordoned")
	}
	for _, t := range n.Spec.Taints {
		if strings.HasPrefix(t.Key, "node.kubernetes.io/") || t.Key == v1alpha1.TaintGPUUnhealthy {
			why = append(why, "taint "+t.Key+":"+string(t.Effect))
		}
	}
	return strings.Join(why, ", ")
}

// WaitNodeHealthy returns once the node is healthy as the API sees it (see NodeUnhealthy), or
// says what it saw last when ctx ends.
func (c *Cluster) WaitNodeHealthy(ctx context.Context, name string) error {
	last, err := c.WaitNode(ctx, name, func(n *corev1.Node) (bool, error) { return NodeUnhealthy(n) == "", nil })
	if err != nil {
		why := "never seen"
		if last != nil {
			why = NodeUnhealthy(last)
		}
		return fmt.Errorf("node %s not healthy (%s): %w", name, why, err)
	}
	return nil
}

// AddNode creates one fake node of that name, with taints, and waits until it is Ready: a
// node a single test owns (e.g. one it makes die), kept from the others' pods by a taint
// only that test tolerates.
func (c *Cluster) AddNode(ctx context.Context, name string, spec NodeSpec, taints ...corev1.Taint) error {
	node := makeNode(name, spec.withDefaults(), 0)
	node.Spec.Taints = taints
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return c.waitNodeReadyWithin(ctx, name, 2*time.Minute)
}

// StopNode makes a fake node die hard, as a machine that lost power: kwok stops simulating it
// (no heartbeat, and no pod of it ever ends) and the node lifecycle controller marks it
// unreachable once its grace period has passed.
//
// kwok leaves alone a node or pod labelled LabelStopped (stages/kwok-controller.yaml), so the
// node and each of its pods gets the label. A pod's label is what holds: kwok's watch of the
// pod delivers it before any later change of that pod (its eviction's deletion), whereas
// kwok's view of the node's Lease, taken here too from kwok by a holder that never renews
// it, lagged once by seconds under a full suite's load, and kwok deleted the evicted pods of
// a node stopped that long before. The Lease keeps kwok off pods bound to the node later.
func (c *Cluster) StopNode(ctx context.Context, name string) error {
	label := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, LabelStopped))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("stop node %s: %w", name, err)
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return fmt.Errorf("stop node %s: list its pods: %w", name, err)
	}
	for _, p := range pods.Items {
		if _, err := c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, label, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stop node %s: label its pod %s/%s: %w", name, p.Namespace, p.Name, err)
		}
	}
	lease := fmt.Sprintf(`{"spec":{"holderIdentity":"faultline-test-stopped","leaseDurationSeconds":86400,"renewTime":%q}}`,
		metav1.NowMicro().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	if _, err := c.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, name, types.MergePatchType, []byte(lease), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("stop node %s: take its lease: %w", name, err)
	}
	return nil
}

// LabelStopped marks a fake node that StopNode stopped, and its pods.
const LabelStopped = "stage.faultline.dev/stopped"
