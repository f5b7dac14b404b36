package inplace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/nodeagent/termmsg"
)

// A worker of a pod that restarts in place and exits non-zero on its own (not stopped by
// the agent for a newer attempt) fires its RestartAllContainers rule: the kubelet removes
// every container of the pod and shows only a synthesized exit (137,
// RestartingAllContainers) in the pod's status. The real exit code is in one status write
// at best, which the controller may never see. The agent follows its node's container
// exits through the runtime's event stream (CRI GetContainerEvents: the runtime sends each
// exit with the statuses of the pod's containers, before the kubelet removes them) and
// writes such an exit onto the pod (v1alpha1.WorkerExit), which the controller judges as
// any failure of the attempt.

// ExitSource is the part of the CRI runtime service that exit reports read: the event
// stream; the exited containers, when it subscribes (those that exited while it was not
// subscribed); and a container's status, for an event that does not carry it.
type ExitSource interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
}

var _ ExitSource = runtimeapi.RuntimeServiceClient(nil)

// ExitReport says whether the exit st of a container of pod is one the controller must be
// told of, and the report; why says why not. attempt and barrierOpen are the run's decision
// (Decisions.For). Pure.
//
// Reported: a non-zero exit (exit 0 completes the pod, whose status then keeps it) of a
// worker container of a pod that restarts in place, which ran the attempt the run is in.
// The attempt the worker ran is the one its pod's barrier opened for (its termination
// message, barrier.OpenedMessage);
// a barrier the status still shows waiting, while the gang's barrier is open, opened for
// the decided attempt (the agent opens a barrier only once the pod's status shows it
// waiting, and only for the decided attempt). An exit of an older attempt's worker is not
// reported: the agent stopped it for the newer attempt, or it died after the controller
// had decided (and the controller has judged that attempt already).
func ExitReport(pod *corev1.Pod, st *runtimeapi.ContainerStatus, attempt int, barrierOpen bool, node string) (report v1alpha1.WorkerExit, why string, ok bool) {
	name := st.GetLabels()[kubelettypes.KubernetesContainerNameLabel]
	switch {
	case st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED:
		return report, "the container has not exited", false
	case st.GetExitCode() == 0:
		return report, "exit 0: the pod's status keeps it", false
	case st.GetLabels()[kubelettypes.KubernetesPodUIDLabel] != string(pod.UID):
		return report, "the container is another pod's", false
	case !hasBarrier(pod):
		return report, "the pod does not restart in place: its status keeps the exit", false
	case !isWorker(pod, name):
		return report, fmt.Sprintf("%q is not a worker container of the pod", name), false
	}
	ran := ranAttempt(pod, st.GetId(), attempt, barrierOpen)
	if ran != attempt {
		return report, fmt.Sprintf("the worker ran attempt %d, not attempt %d, which the run is in", ran, attempt), false
	}
	return workerExit(st, name, attempt, node), "", true
}

// RecreatedExitReport is ExitReport for a worker of a pod that does not restart in place
// (its run recreates the gang's pods): the pod's status keeps the exit, with what the
// kubelet keeps of the log (its last 80 lines, 2 KiB) and a time to the second. The report
// beside it adds what the status cannot hold: the lines that matter from further up the log
// (termmsg.ReadReport, which Exited puts in) and the runtime's time to the nanosecond, which
// orders exits within one second; exitclass reads it for the container it names. Reported:
// a non-zero exit of a worker container of a run's pod that is not being deleted, in the
// attempt the pod was made for. Pure.
func RecreatedExitReport(pod *corev1.Pod, st *runtimeapi.ContainerStatus, node string) (report v1alpha1.WorkerExit, why string, ok bool) {
	name := st.GetLabels()[kubelettypes.KubernetesContainerNameLabel]
	n, numbered := attempt.Number(pod)
	switch {
	case st.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED:
		return report, "the container has not exited", false
	case st.GetExitCode() == 0:
		return report, "exit 0: nothing to explain", false
	case st.GetLabels()[kubelettypes.KubernetesPodUIDLabel] != string(pod.UID):
		return report, "the container is another pod's", false
	case pod.Labels[v1alpha1.LabelRun] == "" || !numbered:
		return report, "not a pod of a run's attempt", false
	case pod.DeletionTimestamp != nil:
		// Whoever deletes the pod stopped its workers (the controller ending an attempt it
		// has judged, a drain): a report per worker of a large gang would say nothing new.
		return report, "the pod is being deleted", false
	case !isWorker(pod, name):
		return report, fmt.Sprintf("%q is not a worker container of the pod", name), false
	}
	return workerExit(st, name, int(n), node), "", true
}

// workerExit is the report of the exit st of the worker container name in attempt n.
func workerExit(st *runtimeapi.ContainerStatus, name string, n int, node string) v1alpha1.WorkerExit {
	report := v1alpha1.WorkerExit{
		Attempt:     int32(n),
		Container:   name,
		ContainerID: st.GetId(),
		ExitCode:    st.GetExitCode(),
		Reason:      st.GetReason(),
		Message:     st.GetMessage(),
		FinishedAt:  nanoTime(st.GetFinishedAt()),
		Node:        node,
	}
	if st.GetStartedAt() > 0 {
		report.StartedAt = nanoTime(st.GetStartedAt())
	}
	return report
}

// ranAttempt is the attempt pod's worker container id last ran (see ExitReport), 0 if none
// since the pod's barrier last started. A barrier in the worker container: the attempt the
// agent's record names for that very container, none for any other (it never opened).
func ranAttempt(pod *corev1.Pod, id string, decided int, barrierOpen bool) int {
	b := attempt.BarrierOf(pod)
	if b.Place == attempt.BarrierInWorker {
		if b.Record != nil && b.Record.ContainerID == id {
			return int(b.Record.Attempt)
		}
		return 0
	}
	_, waiting := b.Waiting()
	switch n, opened := b.Opened(); {
	case opened:
		return int(n)
	case b.Status != nil && b.Status.State.Terminated != nil:
		return 0
	case waiting && barrierOpen:
		return decided
	}
	return 0
}

func isWorker(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func nanoTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// ExitReporter writes a report onto its pod (the agent's Writer).
type ExitReporter interface {
	ReportWorkerExit(ctx context.Context, pod *corev1.Pod, report v1alpha1.WorkerExit) error
}

// ExitWatcher follows the node's container exits and reports those ExitReport selects.
type ExitWatcher struct {
	src       ExitSource
	pods      corelisters.PodLister
	decisions Decisions
	reporter  ExitReporter
	node      string
	log       *slog.Logger
	// Retry is how long it waits before subscribing again after the stream ended.
	Retry time.Duration
	// Unsupported, when set, is called once if the runtime does not implement the event
	// stream; Run then returns: no exit can be reported on this node.
	Unsupported func(err error)
	// BarrierStarted, when set, is told of each pod of the node whose barrier container
	// the runtime started: the in-place loop (Loop.PodChanged) opens it without waiting for
	// the kubelet's relist and status write to show it.
	BarrierStarted func(pod *corev1.Pod)
	// PodStopped, when set, is told of each pod whose sandbox the runtime stopped with
	// none of its containers running (PodStopped, the function); it must not block the
	// event stream.
	PodStopped func(ctx context.Context, stop SandboxStop)
}

// NewExitWatcher is an ExitWatcher over the node's runtime and pods (the agent's informer's
// lister).
func NewExitWatcher(src ExitSource, pods corelisters.PodLister, d Decisions, reporter ExitReporter, node string, log *slog.Logger) *ExitWatcher {
	if log == nil {
		log = slog.Default()
	}
	return &ExitWatcher{src: src, pods: pods, decisions: d, reporter: reporter, node: node, log: log, Retry: time.Second}
}

// Run follows the runtime's events until ctx is done, subscribing again whenever the stream
// ends (the runtime restarted). Each subscription starts with the containers that have
// exited and are still there: an exit it did not see happen is reported as long as the
// kubelet has not removed its container.
func (w *ExitWatcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			w.log.Error("the container runtime sends no container events: the exits of workers that restart in place cannot be reported", "error", err)
			if w.Unsupported != nil {
				w.Unsupported(err)
			}
			return
		}
		w.log.Warn("the container runtime's event stream ended; subscribing again", "error", err, "retry", w.Retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.Retry):
		}
	}
}

// follow reads one subscription of the event stream until it ends.
func (w *ExitWatcher) follow(ctx context.Context) error {
	stream, err := w.src.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return fmt.Errorf("subscribe to the container events: %w", err)
	}
	if err := w.sweep(ctx); err != nil {
		w.log.Warn("list the exited containers", "error", err)
	}
	// The sweep's reports are written before any event's; the next subscription's sweep
	// begins after this one's events are handled.
	queues := newPodQueues(eventsParallelism)
	defer queues.wait()
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the runtime closed the stream")
			}
			return err
		}
		// A runtime that sends no sandbox with its events has them handled in one queue,
		// in order.
		pod := ev.GetPodSandboxStatus().GetId()
		switch ev.GetContainerEventType() {
		case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT:
			if pod == ev.GetContainerId() {
				// The sandbox's own stop (containerd sends it with the sandbox's ID).
				if stop, ok := PodStopped(ev); ok && w.PodStopped != nil {
					w.PodStopped(ctx, stop)
				}
				continue
			}
			queues.do(pod, func() { w.Exited(ctx, ev) })
		case runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT:
			queues.do(pod, func() { w.Started(ctx, ev) })
		}
	}
}

// eventsParallelism bounds the pods whose events are handled at once (podQueues): enough
// that one slow report holds neither the other pods' reports nor a barrier's start, few
// enough that a node's exits at its shutdown do not crowd the API server that the agent's
// marks of the same pods (which every decision waits for) go to at the same moment.
const eventsParallelism = 4

// sweep handles every exited container still in the runtime as if its exit were an event.
func (w *ExitWatcher) sweep(ctx context.Context) error {
	resp, err := w.src.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED},
	}})
	if err != nil {
		return err
	}
	for _, c := range resp.GetContainers() {
		if name := c.GetLabels()[kubelettypes.KubernetesPodNameLabel]; name != "" {
			w.Exited(ctx, &runtimeapi.ContainerEventResponse{ContainerId: c.GetId(), ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT})
		}
	}
	return nil
}

// SandboxStop is a pod whose sandbox the runtime stopped with none of its containers
// running: no process of the pod runs on the node any more.
type SandboxStop struct {
	Namespace, Name string
	UID             types.UID
	// At is when the runtime sent the stop.
	At time.Time
}

// PodStopped reads the stop event of a pod's sandbox: ok when the sandbox is not ready and
// the event lists the pod's containers, none of them running or in a state the runtime
// cannot tell. The kubelet stops a pod's sandbox after its containers (killPod), so on a
// node whose kubelet is ending every pod for a shutdown, this is the pod's end at the
// runtime, before the kubelet's status write says it. Pure.
func PodStopped(ev *runtimeapi.ContainerEventResponse) (SandboxStop, bool) {
	sb := ev.GetPodSandboxStatus()
	if ev.GetContainerEventType() != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT || sb.GetId() == "" ||
		sb.GetId() != ev.GetContainerId() || sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		return SandboxStop{}, false
	}
	// A pod has a container: an empty list is a runtime that could not list them.
	if len(ev.GetContainersStatuses()) == 0 {
		return SandboxStop{}, false
	}
	for _, c := range ev.GetContainersStatuses() {
		if st := c.GetState(); st == runtimeapi.ContainerState_CONTAINER_RUNNING || st == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
			return SandboxStop{}, false
		}
	}
	md := sb.GetMetadata()
	if md.GetNamespace() == "" || md.GetName() == "" || md.GetUid() == "" || ev.GetCreatedAt() <= 0 {
		return SandboxStop{}, false
	}
	return SandboxStop{Namespace: md.GetNamespace(), Name: md.GetName(), UID: types.UID(md.GetUid()), At: time.Unix(0, ev.GetCreatedAt())}, true
}

// Started handles the event of one container's start: a barrier's is told to
// BarrierStarted.
func (w *ExitWatcher) Started(ctx context.Context, ev *runtimeapi.ContainerEventResponse) {
	if w.BarrierStarted == nil {
		return
	}
	st := w.statusOf(ctx, ev)
	labels := st.GetLabels()
	pod, err := w.pods.Pods(labels[kubelettypes.KubernetesPodNamespaceLabel]).Get(labels[kubelettypes.KubernetesPodNameLabel])
	if err != nil {
		return
	}
	// The barrier's container: the init container, or the worker whose entrypoint it is.
	if name, place := attempt.BarrierContainer(&pod.Spec); place != attempt.NoBarrier && labels[kubelettypes.KubernetesContainerNameLabel] == name {
		w.BarrierStarted(pod)
	}
}

// statusOf is the status of ev's container: the event's own, else the runtime's (nil when
// it cannot say).
func (w *ExitWatcher) statusOf(ctx context.Context, ev *runtimeapi.ContainerEventResponse) *runtimeapi.ContainerStatus {
	for _, s := range ev.GetContainersStatuses() {
		if s.GetId() == ev.GetContainerId() {
			return s
		}
	}
	// A runtime that sends no statuses with its events, or a sweep: ask.
	resp, err := w.src.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ev.GetContainerId()})
	if err != nil {
		w.log.Debug("status of a container", "container", ev.GetContainerId(), "error", err)
		return nil
	}
	return resp.GetStatus()
}

// Exited handles the event of one container's exit.
func (w *ExitWatcher) Exited(ctx context.Context, ev *runtimeapi.ContainerEventResponse) {
	st := w.statusOf(ctx, ev)
	if st == nil {
		return
	}
	labels := st.GetLabels()
	ns, name := labels[kubelettypes.KubernetesPodNamespaceLabel], labels[kubelettypes.KubernetesPodNameLabel]
	if ns == "" || name == "" {
		return // not a pod's container (or the sandbox's own)
	}
	pod, err := w.pods.Pods(ns).Get(name)
	if err != nil {
		return
	}
	var (
		report v1alpha1.WorkerExit
		why    string
		n      int
		ok     bool
	)
	if hasBarrier(pod) {
		var open, decided bool
		if n, open, decided = w.decisions.For(pod); !decided {
			return
		}
		report, why, ok = ExitReport(pod, st, n, open, w.node)
	} else {
		report, why, ok = RecreatedExitReport(pod, st, w.node)
		n = int(report.Attempt)
	}
	if !ok {
		w.log.Debug("container exit not reported", "pod", podRef(pod), "container", st.GetId(), "exitCode", st.GetExitCode(), "reason", why)
		return
	}
	// The container's termination message (or its log's tail, with the lines that matter
	// from further up), which the framework hints read: the kubelet removes the container of
	// a pod that restarts in place before the pod's status could show it, and keeps only 2
	// KiB of the log for the others.
	if msg, err := termmsg.ReadReport(st); err != nil {
		w.log.Warn("read a worker's termination message; reporting its exit without it", "pod", podRef(pod), "container", report.Container, "error", err)
	} else {
		report.Message = termmsg.Message(report.Message, msg)
	}
	if err := w.reporter.ReportWorkerExit(ctx, pod, report); err != nil {
		w.log.Warn("report a worker's exit", "pod", podRef(pod), "attempt", n, "exitCode", report.ExitCode, "error", err)
		return
	}
	w.log.Info("reported a worker's exit", "pod", podRef(pod), "attempt", n, "container", report.Container, "exitCode", report.ExitCode, "reason", report.Reason, "messageBytes", len(report.Message))
}
