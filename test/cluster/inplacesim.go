package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/coreclient"
	"github.com/faultline-dev/faultline/pkg/nodeagent/heartbeat"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
)

// SimulateInPlace plays the node side of restarts in place for the kwok nodes' pods of
// namespace until ctx is done. The node agent's part is the agent's own code: the loop of
// package inplace, the runs' decisions as the agent reads them, Decide on each pod. Its two
// container-runtime calls, and what the kubelet does after each, become one status write per
// step, as the kubelet's own (kubeletStatus), and, where the barrier is the worker
// container's entrypoint, the agent's own records before it (of the stop; of the open,
// which writes no status): stopping a pod's old workers writes the pod
// restarted to its barrier (every container's lastState 137 RestartingAllContainers, the
// barrier running again, restartCount up by one, phase Pending); opening its barrier writes
// the barrier done with the attempt's message and the workers running. A pod's first start
// to its barrier is kwok's (stages/pod-barrier-wait.yaml), as every pod start is.
//
// hold, when set, names pods whose agent does not act (yet): a test that holds a pod and
// later lets it go touches it (any change queues it again). It returns once its caches have
// synced.
//
// What it does not model: the time a real kubelet takes (its PLEG relist, ~1 s a step on the
// real nodes: docs/in-place-restart.md), its status write between the two (the workers
// terminated, before the barrier runs again), and the workers' grace period.
func (c *Cluster) SimulateInPlace(ctx context.Context, namespace string, hold func(*corev1.Pod) bool) error {
	return c.SimulateInPlaceWith(ctx, namespace, InPlaceSim{Hold: hold})
}

// InPlaceSim changes the simulated node side of SimulateInPlaceWith.
type InPlaceSim struct {
	// Hold names pods whose agent does not act (yet), as SimulateInPlace's hold.
	Hold func(*corev1.Pod) bool
	// View, when set, is the agents' view of the runs' decisions, given the one their
	// informer keeps: a test makes it lag.
	View func(inplace.Decisions) inplace.Decisions
	// RecordsOnHeartbeat keeps the agents' barrier records on their nodes' heartbeats
	// (heartbeat.Records, the agent's --barrier-records-on-heartbeat) instead of on the pods.
	RecordsOnHeartbeat bool
}

// SimulateInPlaceWith is SimulateInPlace, changed by sim.
func (c *Cluster) SimulateInPlaceWith(ctx context.Context, namespace string, sim InPlaceSim) error {
	hold := sim.Hold
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
	var decisions inplace.Decisions = inplace.StoreDecisions{Runs: runInformer.GetStore()}
	if sim.View != nil {
		decisions = sim.View(decisions)
	}
	rt := kwokRuntime{c: c, hold: hold, actedOn: &sync.Map{}}
	var lister corelisters.PodLister = corelisters.NewPodLister(pods.GetIndexer())
	if sim.RecordsOnHeartbeat {
		rt.records = &nodeRecords{core: runs, pods: lister, byNode: map[string]*heartbeat.Records{}}
		lister = heartbeat.ReadingLister(lister, rt.records.pod)
	}
	loop := inplace.NewLoop(rt, lister, decisions,
		slog.Default().With("component", "inplace-sim", "namespace", namespace))
	loop.Confirm = inplace.ConfirmWith(runs.GetTrainingRun) // as the agent does
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
	// One process plays every node's agent and kubelet, each of which acts for its own pods
	// side by side in a real cluster: as many syncs at a time as the nodes' agents make.
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("simulated in-place agent: list the nodes: %w", err)
	}
	go loop.Run(ctx, simWorkers(len(nodes.Items), sim.RecordsOnHeartbeat))
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

// simWorkers is how many pods the simulated node side syncs at a time, for the whole cluster
// of nodes: what the nodes' agents sync at once side by side (inplace.SyncWorkers each).
// Until 2026-12-07 it was 64 for any cluster, which played a 257-node cluster's agents as if
// eight did the work: the opens of a 2,048-worker gang, each waiting for its node's heartbeat
// write, took 19.4 s one batch after another (2026-12-07-s30-in-place-2048.md). The first
// version (16 at a time, a label and a kwok stage per step, 4 writes a pod) moved ~27 pods a
// second at 2,048 workers (2026-11-26-s15-in-place.md, in bench/results/README.md's older
// reports).
func simWorkers(nodes int, recordsOnHeartbeat bool) int {
	return max(nodes, 1) * inplace.SyncWorkers(recordsOnHeartbeat)
}

// SimulatedRuntimeVersion is the container runtime an in-place capable kwok node reports: the
// real nodes' containerd (hack/tools).
const SimulatedRuntimeVersion = "containerd://2.2.9"

// kwokRuntime carries the agent's decisions out as the kubelet would show them: the agent's
// Restarter would stop the old workers or exec the barrier's open through the CRI, and the
// kubelet would write the pod's status.
type kwokRuntime struct {
	c    *Cluster
	hold func(*corev1.Pod) bool
	// actedOn is, by pod UID, the resourceVersion of the copy the last status was written
	// from. The informer's copy lags the write: until the written status arrives (and
	// queues the pod again), a sync of the same copy would act twice.
	actedOn *sync.Map
	// records, when set, keeps the agents' barrier records on their nodes' heartbeats.
	records *nodeRecords
}

// OpenBarrier is Sync with the gang's barrier open: the loop calls it for every open it
// decided, on the pod's status (a kwok node's status is its runtime: the loop has no
// RuntimeBarrier here).
func (k kwokRuntime) OpenBarrier(ctx context.Context, pod *corev1.Pod, attempt int) (bool, error) {
	a, err := k.Sync(ctx, pod, attempt, true)
	return a == inplace.ActionOpenBarrier, err
}

func (k kwokRuntime) Sync(ctx context.Context, pod *corev1.Pod, attempt int, barrierOpen bool) (inplace.Action, error) {
	if k.hold != nil && k.hold(pod) {
		return inplace.ActionWait, nil
	}
	if rv, ok := k.actedOn.Load(pod.UID); ok && rv == pod.ResourceVersion {
		return inplace.ActionWait, nil
	}
	d := inplace.Decide(pod, attempt, barrierOpen)
	inWorker := inWorkerBarrier(pod)
	if k.records != nil && inWorker {
		return k.syncOnHeartbeat(ctx, pod, d, attempt)
	}
	if d.Action == inplace.ActionStopWorkers && inWorker {
		// The agent records the stop (Writer.RecordStopped) once the barrier, which
		// supervises its worker, stopped it: it waits again in the same container, and the
		// kubelet restarts nothing.
		_, err := k.recordStopped(ctx, pod, attempt)
		if apierrors.IsConflict(err) {
			return inplace.ActionWait, nil // the informer brings the fresh pod
		}
		return d.Action, err
	}
	meta := map[string]any{"resourceVersion": pod.ResourceVersion}
	var status *corev1.PodStatus
	switch {
	case d.Action == inplace.ActionStopWorkers:
		status = restartedToBarrier(pod, metav1.Now())
	case d.Action == inplace.ActionOpenBarrier && inWorker:
		// The agent's record, before its open; the open itself writes nothing: the
		// barrier starts the worker as its child in the container that runs.
		rec, err := json.Marshal(recordOf(pod, attempt))
		if err != nil {
			return d.Action, err
		}
		meta["annotations"] = map[string]string{v1alpha1.AnnotationBarrierRecord: string(rec)}
	case d.Action == inplace.ActionOpenBarrier:
		status = barrierOpened(pod, attempt, metav1.Now())
	default:
		return d.Action, nil
	}
	// The pod as read, or nothing: a status computed from a stale copy must not count a
	// restart twice (on a conflict the informer brings the fresh pod, which queues it again).
	body := map[string]any{"metadata": meta}
	if status != nil {
		body["status"] = status
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return d.Action, err
	}
	_, err = k.c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsConflict(err):
		// Somebody wrote the pod since: the informer brings the new copy and queues it again.
		return inplace.ActionWait, nil
	case err != nil:
		return d.Action, fmt.Errorf("%s pod %s/%s: %w", d.Action, pod.Namespace, pod.Name, err)
	}
	k.actedOn.Store(pod.UID, pod.ResourceVersion)
	return d.Action, nil
}

// syncOnHeartbeat carries d out for pod, whose barrier is its worker's entrypoint, with the
// agent's records on its node's heartbeat: a stop is recorded there (heartbeat.Records), the
// barrier supervising its worker waiting again in the same container; an open is recorded
// there. Neither writes the pod.
func (k kwokRuntime) syncOnHeartbeat(ctx context.Context, pod *corev1.Pod, d inplace.Decision, n int) (inplace.Action, error) {
	recs := k.records.of(pod.Spec.NodeName)
	switch d.Action {
	case inplace.ActionStopWorkers:
		return d.Action, conflictIsWait(recs.RecordStopped(ctx, pod, d.Containers[0], n, nil))
	case inplace.ActionOpenBarrier:
		return d.Action, conflictIsWait(recs.RecordBarrier(ctx, pod, recordOf(pod, n)))
	}
	return d.Action, nil
}

// conflictIsWait is no error for a conflict: the informer brings the fresh pod, which queues
// it again.
func conflictIsWait(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// nodeRecords are the simulated agents' records, each node's on its heartbeat.
type nodeRecords struct {
	core   *coreclient.Client
	pods   corelisters.PodLister
	mu     sync.Mutex
	byNode map[string]*heartbeat.Records
}

func (r *nodeRecords) of(node string) *heartbeat.Records {
	r.mu.Lock()
	defer r.mu.Unlock()
	if recs, ok := r.byNode[node]; ok {
		return recs
	}
	// Each write renews the heartbeat, for as long as the simulated one holds.
	hb := heartbeat.New(heartbeat.Config{Client: r.core, Node: node, Interval: simulatedHeartbeat / 4, Duration: simulatedHeartbeat})
	recs := heartbeat.NewRecords(hb, r.core, node, r.pods, slog.Default().With("component", "inplace-sim-records", "node", node))
	r.byNode[node] = recs
	return recs
}

func (r *nodeRecords) pod(p *corev1.Pod) *corev1.Pod {
	if p.Spec.NodeName == "" {
		return p
	}
	return r.of(p.Spec.NodeName).Pod(p)
}

// recordStopped writes what the node agent writes once the runtime stopped the worker of a
// pod whose barrier is its entrypoint (Writer.RecordStopped): its barrier record, the stop
// for attempt n added, in a pods/status patch against the copy it read. It returns the pod
// as written.
func (k kwokRuntime) recordStopped(ctx context.Context, pod *corev1.Pod, n int) (*corev1.Pod, error) {
	rec := attempt.BarrierRecord(pod)
	if rec == nil || int(rec.StoppedFor) >= n {
		return pod, nil
	}
	rec.StoppedFor = int32(n)
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"annotations":     map[string]string{v1alpha1.AnnotationBarrierRecord: string(b)},
	}})
	if err != nil {
		return nil, err
	}
	out, err := k.c.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsConflict(err) {
		return nil, fmt.Errorf("record the stop of pod %s/%s for attempt %d: %w", pod.Namespace, pod.Name, n, err)
	}
	return out, err
}

// restartedToBarrier is the status the kubelet writes once a RestartAllContainers rule
// restarted pod in place and the barrier runs again: every container removed (lastState 137,
// RestartingAllContainers; restartCount up by one), the init containers before the barrier
// done again, the barrier running, the workers waiting, phase Pending. Only the fields and
// conditions it changes: a strategic merge keeps the others.
func restartedToBarrier(pod *corev1.Pod, now metav1.Time) *corev1.PodStatus {
	removed := removedByRestartAll(now)
	st := corev1.PodStatus{Phase: corev1.PodPending, Conditions: podConditions(pod, corev1.ConditionFalse, "ContainersNotInitialized", now)}
	for _, c := range pod.Spec.InitContainers {
		s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: restartCount(pod.Status.InitContainerStatuses, c.Name) + 1, LastTerminationState: removed}
		if c.Name == v1alpha1.BarrierContainer {
			s.Started = ptr.To(true)
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
		} else {
			s.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, s)
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, RestartCount: restartCount(pod.Status.ContainerStatuses, c.Name) + 1, Started: ptr.To(false),
			LastTerminationState: removed, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}},
		})
	}
	return &st
}

// removedByRestartAll is the last state the kubelet shows of a container that a
// RestartAllContainers rule removed.
func removedByRestartAll(now metav1.Time) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "RestartingAllContainers", Message: "The container is removed because RestartAllContainers in place", FinishedAt: now}}
}

// inWorkerBarrier says whether pod's barrier is its worker container's entrypoint.
func inWorkerBarrier(pod *corev1.Pod) bool {
	_, place := attempt.BarrierContainer(&pod.Spec)
	return place == attempt.BarrierInWorker
}

// recordOf is the agent's record of opening the barrier of pod's worker container, as its
// status shows it, for attempt.
func recordOf(pod *corev1.Pod, n int) v1alpha1.BarrierRecord {
	b := attempt.BarrierOf(pod)
	var restarts int32
	id := ""
	if b.Status != nil {
		restarts, id = b.Status.RestartCount, b.Status.ContainerID
	}
	if id == "" { // kwok's own start of the pod names no container
		id = kwokContainerID(pod, b.Container, restarts)
	}
	return v1alpha1.BarrierRecord{ContainerID: attempt.RuntimeID(id), Restart: restarts, Attempt: int32(n),
		OpenedAt: time.Now().UTC().Format(time.RFC3339Nano)}
}

// kwokContainerID names the container of pod that starts restarts times.
func kwokContainerID(pod *corev1.Pod, name string, restarts int32) string {
	return fmt.Sprintf("kwok://%s-%s-r%d", pod.UID, name, restarts)
}

// barrierOpened is the status the kubelet writes once the barrier opened for attempt and the
// workers started: the barrier done with its message (barrier.OpenedMessage), each worker
// running in a container of this start (the agent stops exactly those next time), phase
// Running and the pod Ready.
func barrierOpened(pod *corev1.Pod, attempt int, now metav1.Time) *corev1.PodStatus {
	st := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: podConditions(pod, corev1.ConditionTrue, "", now)}
	for _, c := range pod.Spec.InitContainers {
		t := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		if c.Name == v1alpha1.BarrierContainer {
			t.Message = barrier.OpenedMessage(attempt)
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, RestartCount: restartCount(pod.Status.InitContainerStatuses, c.Name), Started: ptr.To(false), State: corev1.ContainerState{Terminated: t}})
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, RestartCount: restartCount(pod.Status.ContainerStatuses, c.Name), Ready: true, Started: ptr.To(true),
			ContainerID: fmt.Sprintf("kwok://%s-%s-%d", pod.UID, c.Name, attempt),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return &st
}

// podConditions are the pod's Initialized, ContainersReady and Ready conditions (and its
// readiness gates' when they are True) at status.
func podConditions(pod *corev1.Pod, status corev1.ConditionStatus, reason string, now metav1.Time) []corev1.PodCondition {
	kinds := []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}
	if status == corev1.ConditionTrue {
		for _, g := range pod.Spec.ReadinessGates {
			kinds = append(kinds, g.ConditionType)
		}
	}
	conds := make([]corev1.PodCondition, 0, len(kinds))
	for _, t := range kinds {
		conds = append(conds, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
	}
	return conds
}

func restartCount(statuses []corev1.ContainerStatus, name string) int32 {
	for _, s := range statuses {
		if s.Name == name {
			return s.RestartCount
		}
	}
	return 0
}

// MakeInPlaceCapable makes a kwok node one that restarts pods in place, as a real node does
// with the kubelet's gate on and the node agent ready: it declares
// RestartAllContainersOnContainerExits (the scheduler keeps pods with the rule off nodes that
// do not), reports faultline.dev/InPlaceReady and a runtime that mounts image volumes
// (SimulatedRuntimeVersion), and has a heartbeat that holds for an hour (AgentHeartbeat). A node agent started on the node later
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
		// The runtime kwok plays, as a kubelet reports it: one that mounts image volumes
		// (a barrier in the worker container).
		n.Status.NodeInfo.ContainerRuntimeVersion = SimulatedRuntimeVersion
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
	return c.AgentHeartbeat(ctx, node, simulatedHeartbeat)
}

// simulatedHeartbeat is how long the heartbeat of a simulated agent holds: the whole of a
// test or a bench round (nothing renews it).
const simulatedHeartbeat = time.Hour

// AgentHeartbeat writes node's agent heartbeat (package agentlease), renewed now and holding
// for d, as the agent renews it: a kwok node has no agent, and a node whose agent is silent
// restarts nothing in place. A test that kills a node's agent writes one that has expired.
func (c *Cluster) AgentHeartbeat(ctx context.Context, node string, d time.Duration) error {
	leases := c.Client.CoordinationV1().Leases(agentlease.Namespace)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentlease.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("heartbeat of node %s: %w", node, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, agentlease.Name(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, agentlease.New(node, time.Now(), d), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		agentlease.Renew(l, node, time.Now(), d)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", node, err)
	}
	return nil
}

// WithNodeRecords is pods, each read with the barrier record its node's agent keeps on its
// heartbeat where that is later than its own (attempt.WithRecord), as the controller reads
// them.
func (c *Cluster) WithNodeRecords(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var err error
	out := agentlease.WithRecords(slices.Clone(pods), func(node string) *coordinationv1.Lease {
		l, gerr := c.Client.CoordinationV1().Leases(agentlease.Namespace).Get(ctx, agentlease.Name(node), metav1.GetOptions{})
		if gerr != nil && !apierrors.IsNotFound(gerr) && err == nil {
			err = fmt.Errorf("read the barrier records of node %s: %w", node, gerr)
		}
		if gerr != nil {
			return nil
		}
		return l
	})
	return out, err
}
