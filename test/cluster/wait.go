package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitPods watches the pods of a namespace that match selector and returns the live set
// (sorted by name) as soon as cond holds for it. The condition sees every change, so a test
// can also record what it observed on the way (e.g. two live pods of one index).
func (c *Cluster) WaitPods(ctx context.Context, namespace string, selector labels.Selector, cond func(pods []*corev1.Pod) (bool, error)) ([]*corev1.Pod, error) {
	lw := c.podListWatch(namespace, selector)
	live := map[types.UID]*corev1.Pod{}
	snapshot := func() []*corev1.Pod {
		out := make([]*corev1.Pod, 0, len(live))
		for _, p := range live {
			out = append(out, p)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
	// The initial list arrives as one Added event per pod: judge only once it is complete.
	synced := func(store cache.Store) (bool, error) {
		for _, o := range store.List() {
			p := o.(*corev1.Pod)
			live[p.UID] = p
		}
		return cond(snapshot())
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, synced, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			delete(live, p.UID)
		} else {
			live[p.UID] = p
		}
		return cond(snapshot())
	})
	if err != nil {
		return snapshot(), fmt.Errorf("wait for pods %q in %s: %w", selector, namespace, err)
	}
	return snapshot(), nil
}

// WaitJob watches one Job and returns it as soon as cond holds.
func (c *Cluster) WaitJob(ctx context.Context, namespace, name string, cond func(*batchv1.Job) (bool, error)) (*batchv1.Job, error) {
	lw := cache.NewListWatchFromClient(c.Client.BatchV1().RESTClient(), "jobs", namespace, fields.OneTermEqualSelector("metadata.name", name))
	var last *batchv1.Job
	_, err := watchtools.UntilWithSync(ctx, lw, &batchv1.Job{}, nil, func(e watch.Event) (bool, error) {
		j, ok := e.Object.(*batchv1.Job)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = j
		return cond(j)
	})
	if err != nil {
		return last, fmt.Errorf("wait for job %s/%s: %w", namespace, name, err)
	}
	return last, nil
}

// PodRunning reports whether a pod is Running and not being deleted.
func PodRunning(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
}

// CountRunning is how many of pods are Running (PodRunning).
func CountRunning(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if PodRunning(p) {
			n++
		}
	}
	return n
}

// PodLive reports whether a pod may still have running containers: not yet terminal. A pod
// being deleted is live until it is gone or terminal, since its containers may still run.
func PodLive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// NodeCondition is the node's condition of type t, nil if it has none.
func NodeCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// WorkerTerminated is the terminated state of the pod's worker (the first container that
// shows one), nil if none. A pod that restarts in place never shows its worker's own exit
// (the kubelet removes the container and writes a synthesized 137): then it is the node
// agent's report of it (faultline.dev/worker-exit), which the controller judges by.
func WorkerTerminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return cs.State.Terminated
		}
	}
	if ex, ok := attempt.ReportedExit(p); ok {
		term := ex.Terminated()
		return &term
	}
	return nil
}

// WaitNode watches one Node and returns it as soon as cond holds. cond sees every change.
func (c *Cluster) WaitNode(ctx context.Context, name string, cond func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name))
	var last *corev1.Node
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*corev1.Node)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = n
		return cond(n)
	})
	if err != nil {
		return last, fmt.Errorf("wait for node %s: %w", name, err)
	}
	return last, nil
}

// WaitResourceQuota watches one ResourceQuota until the quota controller has counted what the
// namespace uses of every resource it limits (until then the API server admits nothing it
// limits) and done, if set, holds for it.
func (c *Cluster) WaitResourceQuota(ctx context.Context, namespace, name string, done func(*corev1.ResourceQuota) bool) (*corev1.ResourceQuota, error) {
	lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "resourcequotas", namespace, fields.OneTermEqualSelector("metadata.name", name))
	var last *corev1.ResourceQuota
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.ResourceQuota{}, nil, func(e watch.Event) (bool, error) {
		q, ok := e.Object.(*corev1.ResourceQuota)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = q
		for r := range q.Spec.Hard {
			if _, counted := q.Status.Used[r]; !counted {
				return false, nil
			}
		}
		return done == nil || done(q), nil
	})
	if err != nil {
		return last, fmt.Errorf("the quota controller's count of %s/%s: %w", namespace, name, err)
	}
	return last, nil
}

// WaitAgentHeartbeat returns once the node agent of node has renewed its heartbeat Lease at or
// after since (agentlease): an agent just started that has not is silent to the controller,
// which gives a restart in place on its node up at once.
func (c *Cluster) WaitAgentHeartbeat(ctx context.Context, node string, since time.Time) error {
	last, err := c.WaitAgentLease(ctx, node, func(l *coordinationv1.Lease) bool {
		// RenewTime is kept to the microsecond: a renewal in the same second as since counts.
		return l.Spec.RenewTime != nil && !l.Spec.RenewTime.Time.Before(since.Truncate(time.Second))
	})
	if err != nil {
		renewed := "never"
		if last != nil && last.Spec.RenewTime != nil {
			renewed = last.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		return fmt.Errorf("node agent of %s: no heartbeat since %s (last renewed %s): %w", node, since.UTC().Format(time.RFC3339), renewed, err)
	}
	return nil
}

// WaitAgentLease watches the heartbeat Lease of node's agent until cond holds, and returns
// it (on error, the last one seen, nil if none).
func (c *Cluster) WaitAgentLease(ctx context.Context, node string, cond func(*coordinationv1.Lease) bool) (*coordinationv1.Lease, error) {
	lw := cache.NewListWatchFromClient(c.Client.CoordinationV1().RESTClient(), "leases", agentlease.Namespace,
		fields.OneTermEqualSelector("metadata.name", agentlease.Name(node)))
	var last *coordinationv1.Lease
	_, err := watchtools.UntilWithSync(ctx, lw, &coordinationv1.Lease{}, nil, func(e watch.Event) (bool, error) {
		l, ok := e.Object.(*coordinationv1.Lease)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		last = l
		return cond(l), nil
	})
	return last, err
}

// WaitPodsWithRecords is WaitPods for pods read as the controller reads them: each with the
// barrier record its node's agent keeps on its heartbeat (WithNodeRecords), the condition
// judging the pods after each change of them or of the heartbeats (changes that come
// together are judged once: unlike WaitPods, it does not see every step on the way). With
// the records there, a pod's worker is opened without any write of the pod.
func (c *Cluster) WaitPodsWithRecords(ctx context.Context, namespace string, selector labels.Selector, cond func(pods []*corev1.Pod) (bool, error)) ([]*corev1.Pod, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pods := cache.NewSharedIndexInformer(c.podListWatch(namespace, selector), &corev1.Pod{}, 0, cache.Indexers{})
	leases := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(c.Client.CoordinationV1().RESTClient(), "leases", agentlease.Namespace, fields.Everything()),
		&coordinationv1.Lease{}, 0, cache.Indexers{})
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick(changed) },
		UpdateFunc: func(any, any) { kick(changed) },
		DeleteFunc: func(any) { kick(changed) },
	}
	for _, inf := range []cache.SharedIndexInformer{pods, leases} {
		if _, err := inf.AddEventHandler(notify); err != nil {
			return nil, err
		}
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, leases.HasSynced) {
		return nil, fmt.Errorf("wait for pods %q in %s: %w", selector, namespace, ctx.Err())
	}
	read := func() []*corev1.Pod {
		var out []*corev1.Pod
		for _, o := range pods.GetStore().List() {
			out = append(out, o.(*corev1.Pod))
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return agentlease.WithRecords(out, func(node string) *coordinationv1.Lease {
			o, ok, _ := leases.GetStore().GetByKey(agentlease.Namespace + "/" + agentlease.Name(node))
			if !ok {
				return nil
			}
			return o.(*coordinationv1.Lease)
		})
	}
	kick(changed)
	for {
		select {
		case <-ctx.Done():
			return read(), fmt.Errorf("wait for pods %q in %s: %w", selector, namespace, ctx.Err())
		case <-changed:
			snap := read()
			if ok, err := cond(snap); ok || err != nil {
				return snap, err
			}
		}
	}
}

// WatchPodsWithRecords watches, from now until ctx ends, the pods of namespace that selector
// selects and the node agents' heartbeats, and returns what it saw so far: each change of a
// pod, and each pod of a node whose heartbeat's records changed, read as the controller reads
// it (with its node's barrier record, agentlease.WithRecords), in the order the API server
// wrote them. The order is the writes' resourceVersions: this cluster keeps pods and Leases
// in one etcd, whose revision orders every write (a cluster that stores Leases apart would
// not). A test checks by it what happened before what, the records on heartbeats or not.
func (c *Cluster) WatchPodsWithRecords(ctx context.Context, namespace string, selector labels.Selector) (func() ([]*corev1.Pod, error), error) {
	pods, err := c.Client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	leases, err := c.Client.CoordinationV1().Leases(agentlease.Namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		pods.Stop()
		return nil, err
	}
	type change struct {
		rv  uint64
		obj runtime.Object
	}
	var (
		mu      sync.Mutex
		changes []change
		bad     error
	)
	for _, w := range []watch.Interface{pods, leases} {
		go func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-w.ResultChan():
					if !ok {
						return
					}
					m, err := meta.Accessor(e.Object)
					if err != nil || e.Type == watch.Error || e.Type == watch.Deleted {
						continue
					}
					rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
					mu.Lock()
					if err != nil && bad == nil {
						bad = fmt.Errorf("%T %s: resourceVersion %q is not etcd's revision", e.Object, m.GetName(), m.GetResourceVersion())
					}
					changes = append(changes, change{rv, e.Object})
					mu.Unlock()
				}
			}
		}()
	}
	return func() ([]*corev1.Pod, error) {
		mu.Lock()
		seen, err := slices.Clone(changes), bad
		mu.Unlock()
		sort.SliceStable(seen, func(i, j int) bool { return seen[i].rv < seen[j].rv })
		latest := map[string]*corev1.Pod{}
		heartbeats := map[string]*coordinationv1.Lease{}
		var out []*corev1.Pod
		for _, ch := range seen {
			var changed []*corev1.Pod
			switch o := ch.obj.(type) {
			case *corev1.Pod:
				latest[o.Name] = o
				changed = []*corev1.Pod{o}
			case *coordinationv1.Lease:
				heartbeats[o.Name] = o
				for _, p := range latest {
					if agentlease.Name(p.Spec.NodeName) == o.Name {
						changed = append(changed, p)
					}
				}
				sort.Slice(changed, func(i, j int) bool { return changed[i].Name < changed[j].Name })
			}
			out = append(out, agentlease.WithRecords(changed, func(node string) *coordinationv1.Lease { return heartbeats[agentlease.Name(node)] })...)
		}
		return out, err
	}, nil
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// podListWatch lists and watches the pods of namespace that match selector.
func (c *Cluster) podListWatch(namespace string, selector labels.Selector) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector.String()
			return c.Client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector.String()
			return c.Client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
}
