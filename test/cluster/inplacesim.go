package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/coreclient"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

// Labels that drive the kwok stages of a restart in place (stages/pod-stop-in-place.yaml,
// stages/pod-open-barrier.yaml): where the node agent calls the container runtime on a
// real node, the simulated agent labels the pod, and kwok writes what the kubelet would.
const (
	LabelStopInPlace = "stage.faultline.dev/stop-in-place"
	LabelOpenBarrier = "stage.faultline.dev/open-barrier"
)

// SimulateInPlace plays the node side of restarts in place for the kwok nodes' pods of
// namespace until ctx is done: the node agent's part is the agent's own code (the loop of
// package inplace, the runs' decisions as the agent reads them, Decide on each pod), and only
// its two container-runtime calls are simulated: stopping a pod's old workers and opening its
// barrier become labels, on which the kwok stages write the pod's status as the kubelet
// would (the containers restarted to the barrier; the barrier done and the workers running).
// hold, when set, names pods whose agent does not act (yet): a test that holds a pod and
// later lets it go touches it (any change queues it again). It returns once its caches have
// synced.
//
// What it does not model: the time a real kubelet takes (the kwok stages apply within
// milliseconds), and the agent's own API traffic (none: it acts through the runtime, while
// the simulation writes one label per step).
func (c *Cluster) SimulateInPlace(ctx context.Context, namespace string, hold func(*corev1.Pod) bool) error {
	runs, err := coreclient.New(c.Config)
	if err != nil {
		return err
	}
	runInformer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return runs.ListTrainingRuns(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return runs.WatchTrainingRuns(ctx, o)
		},
	}, &v1alpha1.TrainingRun{}, 0, cache.Indexers{})
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(namespace))
	pods := factory.Core().V1().Pods().Informer()
	loop := inplace.NewLoop(kwokRuntime{c: c, hold: hold}, corelisters.NewPodLister(pods.GetIndexer()), inplace.StoreDecisions{Runs: runInformer.GetStore()},
		slog.Default().With("component", "inplace-sim", "namespace", namespace))
	if _, err := runInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { runChanged(loop, obj) },
		UpdateFunc: func(_, obj any) { runChanged(loop, obj) },
	}); err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { podChanged(loop, obj) },
		UpdateFunc: func(_, obj any) { podChanged(loop, obj) },
	}); err != nil {
		return err
	}
	go runInformer.RunWithContext(ctx)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), runInformer.HasSynced, pods.HasSynced) {
		return fmt.Errorf("simulated in-place agent: caches of %s did not sync: %w", namespace, ctx.Err())
	}
	// One process plays every node's agents: 16 syncs at a time for the whole cluster, where
	// a real cluster has 4 per node. That is the simulation's pace at 2,048 workers (~27 pods
	// a second on this machine: bench/results/2026-11-26-s15-in-place.md). 4 per kwok node
	// (1,028 at once) was tried and was slower: 592 of 2,048 pods started in 10 minutes, each
	// sync waiting on an API server that thousands of concurrent patches had swamped.
	go loop.Run(ctx, 16)
	return nil
}

func runChanged(loop *inplace.Loop, obj any) {
	if r, ok := obj.(*v1alpha1.TrainingRun); ok && r.Namespace != "" {
		loop.RunChanged(r.Namespace, r.Name)
	}
}

func podChanged(loop *inplace.Loop, obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		loop.PodChanged(p)
	}
}

// kwokRuntime carries the agent's decisions out through the kwok stages: the agent's
// Restarter would stop the old workers or exec the barrier's open.
type kwokRuntime struct {
	c    *Cluster
	hold func(*corev1.Pod) bool
}

func (k kwokRuntime) Sync(ctx context.Context, pod *corev1.Pod, attempt int, barrierOpen bool) (inplace.Action, error) {
	if k.hold != nil && k.hold(pod) {
		return inplace.ActionWait, nil
	}
	d := inplace.Decide(pod, attempt, barrierOpen)
	n := strconv.Itoa(attempt)
	var labels map[string]any
	switch d.Action {
	case inplace.ActionStopWorkers:
		// The barrier's go signal of the attempt before goes with the workers it let start.
		labels = map[string]any{LabelStopInPlace: n, LabelOpenBarrier: nil}
	case inplace.ActionOpenBarrier:
		labels = map[string]any{LabelOpenBarrier: n, LabelStopInPlace: nil}
	default:
		return d.Action, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return d.Action, err
	}
	if _, err := k.c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return d.Action, fmt.Errorf("%s pod %s/%s: %w", d.Action, pod.Namespace, pod.Name, err)
	}
	return d.Action, nil
}

// MakeInPlaceCapable makes a kwok node one that restarts pods in place, as a real node does
// with the kubelet's gate on and the node agent ready: it declares
// RestartAllContainersOnContainerExits (the scheduler keeps pods with the rule off nodes that
// do not) and reports faultline.dev/InPlaceReady. A node agent started on the node later
// writes its own readiness (False, with simulated hardware): call it again after.
func (c *Cluster) MakeInPlaceCapable(ctx context.Context, node string) error {
	// kwok writes the node's status too (its heartbeat): read, change, write until no write
	// came between.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(n.Status.DeclaredFeatures, v1alpha1.FeatureRestartAllContainers) {
			n.Status.DeclaredFeatures = append(n.Status.DeclaredFeatures, v1alpha1.FeatureRestartAllContainers)
		}
		ready := corev1.NodeCondition{
			Type: v1alpha1.NodeConditionInPlaceReady, Status: corev1.ConditionTrue, Reason: v1alpha1.InPlaceReasonRuntimeReady,
			Message: "simulated: kwok plays the kubelet's restart in place", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}
		// Replaced where a node agent wrote its own (a simulated-hardware agent has no
		// container runtime, and says so).
		n.Status.Conditions = append(slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == ready.Type }), ready)
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("make node %s restart in place: %w", node, err)
	}
	return nil
}
