package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/heartbeat"
	"github.com/faultline-dev/faultline/pkg/nodeagent/inplace"
	"github.com/faultline-dev/faultline/pkg/nodeagent/runwatch"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// Runs lists and watches the TrainingRuns, read-only: the node agent reads there what the
// controller decided for an in-place restart (the attempt, whether the gang's barrier is
// open), of the runs with pods on its node alone (runwatch). coreclient.Client is one.
type Runs interface {
	runwatch.Runs
	// GetTrainingRun reads one run from the API server itself: a barrier opens only for
	// the attempt it confirms (inplace.Confirm).
	GetTrainingRun(ctx context.Context, namespace, name string) (*v1alpha1.TrainingRun, error)
}

// runsSyncTimeout bounds the first reads of the TrainingRuns.
const runsSyncTimeout = 20 * time.Second

// runInPlace carries the runs' in-place decisions out on the node's pods until ctx is done:
// read-only watches of the runs with pods on the node (runwatch), the loop of package
// inplace over the node's pod informer, and the pod and run events that queue pods into it;
// and it reports, through reporter, the exits of workers that end on their own
// (inplace.ExitWatcher), calling noExits if the runtime cannot tell them, and tells stopped
// of each pod the runtime stopped (inplace.PodStopped). It returns once
// the runs of the node's pods have been read (so that no decision is read from an empty
// cache), with the loop and the exit watcher running.
func runInPlace(ctx context.Context, runs Runs, restarter *inplace.Restarter, podInformer cache.SharedIndexInformer, podLister corelisters.PodLister, reporter inplace.ExitReporter, noExits func(error), stopped func(context.Context, inplace.SandboxStop), node string, tp *tracing.Provider, log *slog.Logger) (*inplace.Checkpointer, error) {
	if restarter.Exits() == nil {
		return nil, errors.New("the container runtime connection has no event stream for the workers' exits")
	}
	// Bounded: an agent that cannot list the runs (the CRD not installed yet, RBAC without
	// them) must not wait here forever, before its inhibitor lock; it runs without
	// restarts in place instead.
	pctx, cancel := context.WithTimeout(ctx, runsSyncTimeout)
	defer cancel()
	if err := runwatch.Probe(pctx, runs); err != nil {
		return nil, fmt.Errorf("the TrainingRuns could not be listed (is faultline's CRD installed, and may the agent list them?): %w", err)
	}
	var loop *inplace.Loop
	// A run's checkpoint request is asked of the node's workers as soon as the run says so.
	ck := &inplace.Checkpointer{Restarter: restarter, Pods: podLister, Clock: clock.RealClock{}, Log: log.With("component", "checkpoint")}
	ck.Records, _ = restarter.Records.(inplace.CheckpointRecorder)
	watched := runwatch.New(runs, podInformer.GetStore(), slimRun, func(ns, name string) {
		loop.RunChanged(ns, name)
		if ck.Records != nil {
			ck.RunChanged(ctx, ns, name)
		}
	}, log.With("component", "runs"))
	ck.Runs = watched
	decisions := inplace.StoreDecisions{Runs: watched}
	loop = inplace.NewLoop(restarter, podLister, decisions, log.With("component", "inplace"))
	loop.Confirm = inplace.ConfirmWith(runs.GetTrainingRun)
	restarter.Confirm = inplace.ConfirmEach(runs.GetTrainingRun)
	loop.Traced = traceInPlace(tp, watched, node)
	exits := inplace.NewExitWatcher(restarter.Exits(), podLister, decisions, reporter, node, log.With("component", "worker-exits"))
	exits.Unsupported = noExits
	exits.PodStopped = stopped
	// A barrier opens as soon as the runtime starts it (the gang's barrier open), not once
	// the kubelet's relist and status write show it.
	exits.BarrierStarted = loop.PodChanged
	loop.RuntimeBarrier = restarter.BarrierRunning
	if _, err := podInformer.AddEventHandler(watched.Handler()); err != nil {
		return nil, fmt.Errorf("watch the runs of the node's pods: %w", err)
	}
	podChanged := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			loop.PodChanged(p)
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    podChanged,
		UpdateFunc: func(_, obj any) { podChanged(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watch the node's pods for in-place restarts: %w", err)
	}
	if err := watched.Start(ctx, runsSyncTimeout); err != nil {
		return nil, err
	}
	_, onHeartbeat := restarter.Records.(*heartbeat.Records)
	go loop.Run(ctx, inplace.SyncWorkers(onHeartbeat))
	go exits.Run(ctx)
	return ck, nil
}

// traceInPlace records the loop's steps on a pod (its old workers stopped, its barrier
// opened) in the run's current episode (status.trace), as children of the episode's root:
// beside the kubelet's spans of the same pod (k8s.pod.uid), they show where a restart in
// place spends its time. Nil when tracing is off.
func traceInPlace(tp *tracing.Provider, runs interface {
	GetByKey(key string) (item any, exists bool, err error)
}, node string) func(context.Context, inplace.Step) {
	if !tp.Enabled() {
		return nil
	}
	return func(ctx context.Context, st inplace.Step) {
		pod := st.Pod
		obj, _, _ := runs.GetByKey(pod.Namespace + "/" + pod.Labels[v1alpha1.LabelRun])
		run, _ := obj.(*v1alpha1.TrainingRun)
		if run == nil || run.Status.Trace == nil {
			return
		}
		parent, ok := tracing.ParseTraceparent(run.Status.Trace.Traceparent)
		if !ok {
			return
		}
		name := tracing.SpanInPlaceStop
		if st.Action == inplace.ActionOpenBarrier {
			name = tracing.SpanInPlaceOpen
		}
		s := tracing.Span{Name: name, Start: st.Start, End: st.End, Attributes: []attribute.KeyValue{
			tracing.KeyRun.String(run.Name), tracing.KeyNamespace.String(pod.Namespace), tracing.KeyPod.String(pod.Name),
			tracing.KeyPodUID.String(string(pod.UID)), tracing.KeyNode.String(node), tracing.KeyAttempt.Int(st.Attempt),
		}}
		if st.Via != "" {
			s.Attributes = append(s.Attributes, tracing.KeyBarrierSignal.String(st.Via))
		}
		if st.ViaReason != "" {
			s.Attributes = append(s.Attributes, tracing.KeyBarrierSignalReason.String(st.ViaReason))
		}
		if st.Err != nil {
			s.Error = st.Err.Error()
		}
		tp.Emit(ctx, parent, s)
	}
}

// slimRun keeps of a cached TrainingRun what a decision reads (inplace.RunDecision): its
// name, namespace and UID, its phase, attempt and current attempt's record: its pod
// template, most of it, is nothing the agent reads; and its episode's traceparent, which
// the agent's spans of a restart in place join (traceInPlace).
func slimRun(obj any) (any, error) {
	r, ok := obj.(*v1alpha1.TrainingRun)
	if !ok {
		return obj, nil
	}
	out := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace, UID: r.UID, ResourceVersion: r.ResourceVersion, DeletionTimestamp: r.DeletionTimestamp},
		Status:     v1alpha1.TrainingRunStatus{Phase: r.Status.Phase, Attempt: r.Status.Attempt},
	}
	if tr := r.Status.Trace; tr != nil && tr.Traceparent != "" {
		out.Status.Trace = &v1alpha1.TraceStatus{Traceparent: tr.Traceparent}
	}
	if h := r.Status.Attempts; len(h) > 0 {
		out.Status.Attempts = []v1alpha1.AttemptRecord{h[len(h)-1]}
	}
	// A checkpoint on notice: how to ask (the signal), and the request (inplace.Checkpointer).
	out.Spec.Checkpoint, out.Status.Checkpoint = r.Spec.Checkpoint, r.Status.Checkpoint
	return out, nil
}
