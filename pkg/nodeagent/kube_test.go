package nodeagent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"
)

// clientsetKube drives the agent with a client-go clientset: the unit tests' fake one,
// whose tracker applies patches and records every action.
type clientsetKube struct{ c kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on the fake clientset's answer: it cannot stream
// an informer's initial list.
func (k clientsetKube) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(k.c)
}

func (k clientsetKube) ListResourceSlices(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	return k.c.ResourceV1().ResourceSlices().List(ctx, opts)
}

func (k clientsetKube) WatchResourceSlices(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return k.c.ResourceV1().ResourceSlices().Watch(ctx, opts)
}

func (k clientsetKube) ListDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (*resourcev1.DeviceTaintRuleList, error) {
	return k.c.ResourceV1().DeviceTaintRules().List(ctx, opts)
}

func (k clientsetKube) WatchDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return k.c.ResourceV1().DeviceTaintRules().Watch(ctx, opts)
}

func (k clientsetKube) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return k.c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
}

func (k clientsetKube) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return k.c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
}

func (k clientsetKube) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return k.c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (k clientsetKube) PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error {
	_, err := k.c.CoreV1().Pods(namespace).Patch(ctx, name, pt, data, metav1.PatchOptions{}, "status")
	return err
}

func (k clientsetKube) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return k.c.CoreV1().Nodes().List(ctx, opts)
}

func (k clientsetKube) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return k.c.CoreV1().Nodes().Watch(ctx, opts)
}

func (k clientsetKube) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return k.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (k clientsetKube) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error {
	_, err := k.c.CoreV1().Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{}, subresources...)
	return err
}
