// Package coreclient is a client of the pods and nodes of the core/v1 API, of the
// TrainingRuns, the DRA drivers' ResourceSlices and the DeviceTaintRules (read-only) and of
// the node agent's heartbeat Lease, and nothing else.
//
// client-go's clientset links every API group of Kubernetes (their types, their typed
// clients, their apply configurations) and registers them all in its scheme at start. The
// node agent runs on every node and needs two resources: the clientset made up most of its
// executable, and its resident memory follows the executable's size. This client decodes
// with a scheme of core/v1 alone.
package coreclient

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
	// params encodes ListOptions and friends into a request's query.
	params = runtime.NewParameterCodec(scheme)
)

func init() {
	// core/v1's registration also registers meta/v1's options, Status and WatchEvent.
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := resourcev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// Client reads and patches pods and nodes, and reads TrainingRuns.
type Client struct {
	rest rest.Interface
	// runs is faultline.dev/v1alpha1's: the node agent reads the runs' decisions of an
	// in-place restart there.
	runs rest.Interface
	// leases is coordination.k8s.io/v1's: the node agent's heartbeat.
	leases rest.Interface
	// slices is resource.k8s.io/v1's: the UUIDs of the GPUs DRA drivers allocate.
	slices rest.Interface
}

// New returns a client of cfg's API server. cfg's rate limits apply.
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	fc := rest.CopyConfig(c)
	fc.GroupVersion = &v1alpha1.GroupVersion
	fc.APIPath = "/apis"
	runs, err := rest.RESTClientFor(fc)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", v1alpha1.GroupVersion, err)
	}
	lc := rest.CopyConfig(fc)
	lc.GroupVersion = &coordinationv1.SchemeGroupVersion
	leases, err := rest.RESTClientFor(lc)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", coordinationv1.SchemeGroupVersion, err)
	}
	sc := rest.CopyConfig(fc)
	sc.GroupVersion = &resourcev1.SchemeGroupVersion
	slices, err := rest.RESTClientFor(sc)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", resourcev1.SchemeGroupVersion, err)
	}
	return &Client{rest: rc, runs: runs, leases: leases, slices: slices}, nil
}

// ListResourceSlices lists ResourceSlices (the agent's node's, by a field selector).
func (c *Client) ListResourceSlices(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	out := &resourcev1.ResourceSliceList{}
	err := withTimeout(c.slices.Get().Resource("resourceslices").VersionedParams(&opts, params), opts).Do(ctx).Into(out)
	return out, err
}

// WatchResourceSlices watches ResourceSlices (the agent's node's, by a field selector).
func (c *Client) WatchResourceSlices(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return withTimeout(c.slices.Get().Resource("resourceslices").VersionedParams(&opts, params), opts).Watch(ctx)
}

// ListDeviceTaintRules lists the cluster's DeviceTaintRules (resource.k8s.io/v1, Kubernetes
// 1.37; a 404 where the API is not served).
func (c *Client) ListDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (*resourcev1.DeviceTaintRuleList, error) {
	out := &resourcev1.DeviceTaintRuleList{}
	err := withTimeout(c.slices.Get().Resource("devicetaintrules").VersionedParams(&opts, params), opts).Do(ctx).Into(out)
	return out, err
}

// WatchDeviceTaintRules watches the cluster's DeviceTaintRules.
func (c *Client) WatchDeviceTaintRules(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return withTimeout(c.slices.Get().Resource("devicetaintrules").VersionedParams(&opts, params), opts).Watch(ctx)
}

// GetLease reads one Lease.
func (c *Client) GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.leases.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(out)
	return out, err
}

// CreateLease creates a Lease.
func (c *Client) CreateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.leases.Post().Namespace(l.Namespace).Resource("leases").Body(l).Do(ctx).Into(out)
	return out, err
}

// UpdateLease updates a Lease (its resourceVersion guards against a lost update).
func (c *Client) UpdateLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.leases.Put().Namespace(l.Namespace).Resource("leases").Name(l.Name).Body(l).Do(ctx).Into(out)
	return out, err
}

// ListTrainingRuns lists TrainingRuns of every namespace.
func (c *Client) ListTrainingRuns(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.TrainingRunList, error) {
	out := &v1alpha1.TrainingRunList{}
	err := withTimeout(c.runs.Get().Resource(v1alpha1.ResourceTrainingRun).VersionedParams(&opts, params), opts).Do(ctx).Into(out)
	return out, err
}

// GetTrainingRun reads one TrainingRun from the API server (a quorum read: never a cache's
// older copy).
func (c *Client) GetTrainingRun(ctx context.Context, namespace, name string) (*v1alpha1.TrainingRun, error) {
	out := &v1alpha1.TrainingRun{}
	err := c.runs.Get().Namespace(namespace).Resource(v1alpha1.ResourceTrainingRun).Name(name).Do(ctx).Into(out)
	return out, err
}

// WatchTrainingRuns watches TrainingRuns of every namespace.
func (c *Client) WatchTrainingRuns(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return withTimeout(c.runs.Get().Resource(v1alpha1.ResourceTrainingRun).VersionedParams(&opts, params), opts).Watch(ctx)
}

// ListPods lists pods of every namespace.
func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := withTimeout(c.rest.Get().Resource("pods").VersionedParams(&opts, params), opts).Do(ctx).Into(out)
	return out, err
}

// WatchPods watches pods of every namespace.
func (c *Client) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return withTimeout(c.rest.Get().Resource("pods").VersionedParams(&opts, params), opts).Watch(ctx)
}

// GetPod reads one pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rest.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

// PatchPodStatus patches a pod through its status subresource (which also takes metadata).
func (c *Client) PatchPodStatus(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) error {
	return c.rest.Patch(pt).Namespace(namespace).Resource("pods").Name(name).SubResource("status").Body(data).Do(ctx).Error()
}

// ListNodes lists nodes (the agent's own, by a field selector).
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := withTimeout(c.rest.Get().Resource("nodes").VersionedParams(&opts, params), opts).Do(ctx).Into(out)
	return out, err
}

// WatchNodes watches nodes (the agent's own, by a field selector).
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return withTimeout(c.rest.Get().Resource("nodes").VersionedParams(&opts, params), opts).Watch(ctx)
}

// GetNode reads one node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.rest.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

// PatchNode patches a node, or one of its subresources ("status").
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, subresources ...string) error {
	return c.rest.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...).Body(data).Do(ctx).Error()
}

// withTimeout bounds a list or watch by its TimeoutSeconds, as client-go's typed clients do:
// the server ends a watch then, and the client must not wait longer.
func withTimeout(r *rest.Request, opts metav1.ListOptions) *rest.Request {
	if opts.TimeoutSeconds != nil {
		return r.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return r
}
