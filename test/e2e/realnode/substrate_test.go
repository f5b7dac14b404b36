package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/test/cluster"
)

// TestRealNodesBesideKwokNodes: the real nodes are kubelets on containerd 2.x, tainted so that
// pods written for kwok's nodes stay off them, and kwok leaves them and their pods alone: a
// pod on a real node that carries the label of kwok's failure stage keeps running (kwok
// would fail it at once if it managed the node), while the same pod on the kwok node fails.
func TestRealNodesBesideKwokNodes(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, rn := range c.Real.Nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, rn.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		info := n.Status.NodeInfo
		if want := c.Tools.KubernetesVersion(); info.KubeletVersion != want || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
			t.Errorf("node %s: kubelet %q, runtime %q: want kubelet %s (the cluster's) on containerd 2.x", n.Name, info.KubeletVersion, info.ContainerRuntimeVersion, want)
		}
		if _, ok := n.Annotations[cluster.AnnotationKwokNode]; ok {
			t.Errorf("node %s carries kwok's annotation %s", n.Name, cluster.AnnotationKwokNode)
		}
		tainted := false
		for _, taint := range n.Spec.Taints {
			tainted = tainted || (taint.Key == cluster.TaintRealNode && taint.Effect == corev1.TaintEffectNoSchedule)
		}
		if !tainted || n.Labels[cluster.LabelNodeKind] != cluster.NodeKindReal {
			t.Errorf("node %s: taints %v, labels %v: want the %s taint and %s=%s", n.Name, n.Spec.Taints, n.Labels,
				cluster.TaintRealNode, cluster.LabelNodeKind, cluster.NodeKindReal)
		}
	}

	// A pod written for kwok (no toleration) goes to the kwok node.
	sel := labels.SelectorFromSet(labels.Set{"test": "beside"})
	kwokPod := stagePod("on-kwok", "")
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, kwokPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	realPod := stagePod("on-real", c.Real.Nodes[0].Name)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, realPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		done := 0
		for _, p := range pods {
			if p.Name == realPod.Name && p.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s on a real node Failed: kwok played its stages on it", p.Name)
			}
			if (p.Name == kwokPod.Name && p.Status.Phase == corev1.PodFailed) || (p.Name == realPod.Name && cluster.PodRunning(p)) {
				done++
			}
		}
		return done == 2, nil
	})
	if err != nil {
		t.Fatalf("the kwok pod Failed by kwok's stage and the real pod Running: %v; pods %s", err, describePods(pods))
	}
	for _, p := range pods {
		switch p.Name {
		case kwokPod.Name:
			if p.Spec.NodeName != cluster.NodeName(0) {
				t.Errorf("pod %s without the real nodes' toleration was scheduled to %s", p.Name, p.Spec.NodeName)
			}
		case realPod.Name:
			if id := p.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
				t.Errorf("pod %s on %s has container %q: want one that containerd runs", p.Name, p.Spec.NodeName, id)
			}
		}
	}
	// kwok fails a pod with its failure label within milliseconds; the real one is still
	// running after the kwok pod has long failed, and a while more.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	_, err = c.WaitPods(wctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Name == realPod.Name && !cluster.PodRunning(p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		t.Errorf("pod %s on a real node stopped running: kwok played its stages on it", realPod.Name)
	}
}

// stagePod is a pod that kwok's failure stage fails at once (exit 42) if kwok manages its
// node; on node (if set) with the real nodes' toleration.
func stagePod(name, node string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"test": "beside", cluster.LabelFail: "true"},
			Annotations: map[string]string{cluster.AnnotationExitCode: "42"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "worker", Image: cluster.WorkerImage, ImagePullPolicy: corev1.PullNever,
				Env: gangOfOne(),
			}},
		},
	}
	if node != "" {
		p.Spec.NodeName = node
		p.Spec.Tolerations = []corev1.Toleration{cluster.RealNodeToleration}
	}
	return p
}
