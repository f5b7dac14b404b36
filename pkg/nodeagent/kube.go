package nodeagent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/faultline-dev/faultline/pkg/coreclient"
)

// Kube is all the agent asks of the API server: the pods of its node (every namespace)
// and its Node. coreclient.Client implements it without client-go's full clientset, whose
// every API group would make up most of the agent's memory.
type Kube interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error
	ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error
	DeviceTaints
}

var _ Kube = &coreclient.Client{}
