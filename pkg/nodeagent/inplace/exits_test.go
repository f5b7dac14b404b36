package inplace

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/nodeagent/termmsg"
)

var (
	started  = time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	finished = started.Add(90*time.Second + 123*time.Nanosecond)
)

// exitOf is the runtime's status of a container of pod uid-1 that exited with code.
func exitOf(id, name string, code int32) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id: id, State: exited, ExitCode: code, Reason: "Error", StartedAt: started.UnixNano(), FinishedAt: finished.UnixNano(),
		Labels: map[string]string{
			"io.kubernetes.pod.uid": "uid-1", "io.kubernetes.container.name": name,
			"io.kubernetes.pod.namespace": "ml", "io.kubernetes.pod.name": "llm-0",
		},
	}
}

func TestExitReport(t *testing.T) {
	report := func(attempt int32, code int32) v1alpha1.WorkerExit {
		return v1alpha1.WorkerExit{Attempt: attempt, Container: "worker", ContainerID: "w2", ExitCode: code, Reason: "Error",
			StartedAt: "2026-11-26T03:00:00Z", FinishedAt: "2026-11-26T03:01:30.000000123Z", Node: "n1"}
	}
	cases := map[string]struct {
		pod         *corev1.Pod
		st          *runtimeapi.ContainerStatus
		attempt     int
		barrierOpen bool
		want        *v1alpha1.WorkerExit
	}{
		"a worker of the attempt the run is in exits 1": {
			pod: makePod().opened("attempt=2").worker("worker", "containerd://w2", exited143).obj(),
			st:  exitOf("w2", "worker", 1), attempt: 2, barrierOpen: true, want: ptr.To(report(2, 1)),
		},
		"the barrier opened, its status not written yet": {
			pod: makePod().barrier(running).obj(),
			st:  exitOf("w2", "worker", 137), attempt: 2, barrierOpen: true, want: ptr.To(report(2, 137)),
		},
		"a worker of an older attempt (stopped by the agent for the newer one)": {
			pod: makePod().opened("attempt=1").worker("worker", "containerd://w2", exited143).obj(),
			st:  exitOf("w2", "worker", 143), attempt: 2, barrierOpen: false,
		},
		"a waiting barrier the gang has not released: no worker of the attempt ran": {
			pod: makePod().barrier(running).obj(),
			st:  exitOf("w2", "worker", 143), attempt: 2, barrierOpen: false,
		},
		"exit 0": {
			pod: makePod().opened("attempt=2").obj(),
			st:  exitOf("w2", "worker", 0), attempt: 2, barrierOpen: true,
		},
		"the barrier's own exit": {
			pod: makePod().opened("attempt=2").obj(),
			st:  exitOf("bar", v1alpha1.BarrierContainer, 1), attempt: 2, barrierOpen: true,
		},
		"a sidecar": {
			pod: makePod().opened("attempt=2").obj(),
			st:  exitOf("side", "sidecar", 1), attempt: 2, barrierOpen: true,
		},
		"another pod's container": {
			pod: func() *corev1.Pod { p := makePod().opened("attempt=2").obj(); p.UID = "uid-9"; return p }(),
			st:  exitOf("w2", "worker", 1), attempt: 2, barrierOpen: true,
		},
		"a pod that does not restart in place": {
			pod: func() *corev1.Pod { p := makePod().obj(); p.Spec.InitContainers = nil; return p }(),
			st:  exitOf("w2", "worker", 1), attempt: 2, barrierOpen: true,
		},
		"still running": {
			pod: makePod().opened("attempt=2").obj(),
			st:  func() *runtimeapi.ContainerStatus { s := exitOf("w2", "worker", 0); s.State = run; return s }(), attempt: 2, barrierOpen: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why, ok := ExitReport(tc.pod, tc.st, tc.attempt, tc.barrierOpen, "n1")
			if tc.want == nil {
				if ok {
					t.Fatalf("reported %+v, want no report", got)
				}
				if why == "" {
					t.Error("no reason given for not reporting")
				}
				return
			}
			if !ok {
				t.Fatalf("not reported (%s), want %+v", why, *tc.want)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeEvents is an ExitSource whose one subscription delivers events, then ends.
type fakeEvents struct {
	*FakeRuntime
	events   []*runtimeapi.ContainerEventResponse
	statuses map[string]*runtimeapi.ContainerStatus
}

func (f *fakeEvents) GetContainerEvents(context.Context, *runtimeapi.GetEventsRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error) {
	return &eventStream{events: f.events}, nil
}

func (f *fakeEvents) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: f.statuses[in.ContainerId]}, nil
}

type eventStream struct {
	grpc.ClientStream
	events []*runtimeapi.ContainerEventResponse
}

func (s *eventStream) Recv() (*runtimeapi.ContainerEventResponse, error) {
	if len(s.events) == 0 {
		return nil, io.EOF
	}
	e := s.events[0]
	s.events = s.events[1:]
	return e, nil
}

type reports struct {
	mu  sync.Mutex
	got []v1alpha1.WorkerExit
}

func (r *reports) ReportWorkerExit(_ context.Context, _ *corev1.Pod, ex v1alpha1.WorkerExit) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ex)
	return nil
}

// The watcher reports a worker's exit from the event that carries the pod's statuses, and
// one it missed while not subscribed from the exited containers it finds when it
// subscribes; it leaves the other exits alone (a started worker, a sidecar's exit). The
// worker's report carries its termination message, read from the file the kubelet mounted.
func TestExitWatcher(t *testing.T) {
	pod := makePod().opened("attempt=2").worker("worker", "containerd://w2", running).obj()
	msgFile := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(msgFile, []byte("RESOURCE_EXHAUSTED: out of memory on device 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	workerExit := exitOf("w2", "worker", 1)
	workerExit.Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: msgFile}}
	workerExit.Annotations = map[string]string{termmsg.AnnotationPath: "/dev/termination-log"}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(pod); err != nil {
		t.Fatal(err)
	}
	missed := exitOf("h2", "helper", 2)
	missedCtr := ctr("h2", "uid-1", "helper", exited)
	missedCtr.Labels["io.kubernetes.pod.name"] = "llm-0"
	src := &fakeEvents{
		FakeRuntime: &FakeRuntime{Containers: []*runtimeapi.Container{missedCtr}},
		statuses:    map[string]*runtimeapi.ContainerStatus{"h2": missed},
		events: []*runtimeapi.ContainerEventResponse{
			{ContainerId: "w2", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
			{ContainerId: "side", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ContainersStatuses: []*runtimeapi.ContainerStatus{exitOf("side", "sidecar", 1)}},
			{ContainerId: "w2", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ContainersStatuses: []*runtimeapi.ContainerStatus{exitOf("side", "sidecar", 1), workerExit}},
		},
	}
	got := &reports{}
	w := NewExitWatcher(src, corelisters.NewPodLister(idx), decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), got, "n1", nil)
	if err := w.follow(context.Background()); err == nil {
		t.Fatal("follow returned no error at the stream's end")
	}
	var exits []string
	for _, ex := range got.got {
		exits = append(exits, ex.ContainerID)
	}
	if want := []string{"h2", "w2"}; !cmp.Equal(want, exits) {
		t.Errorf("reported the exits of %v, want %v (the missed helper's, then the worker's)", exits, want)
	}
	if n := len(got.got); n > 0 && got.got[n-1].Message != "RESOURCE_EXHAUSTED: out of memory on device 0" {
		t.Errorf("the worker's report says message %q, want its termination message", got.got[n-1].Message)
	}
}

// unimplementedEvents is a runtime that answers the CRI but sends no container events.
type unimplementedEvents struct{ *fakeEvents }

func (unimplementedEvents) GetContainerEvents(context.Context, *runtimeapi.GetEventsRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[runtimeapi.ContainerEventResponse], error) {
	return nil, status.Error(codes.Unimplemented, "unknown method GetContainerEvents")
}

// A runtime without the event stream stops the watcher at once and says so (the agent then
// tells the controller its node cannot restart in place), rather than retrying forever.
func TestExitWatcherUnsupportedRuntime(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	w := NewExitWatcher(unimplementedEvents{&fakeEvents{FakeRuntime: &FakeRuntime{}}}, corelisters.NewPodLister(idx),
		decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 1, true, true }), &reports{}, "n1", nil)
	w.Retry = time.Millisecond
	var got error
	w.Unsupported = func(err error) { got = err }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.Run(ctx)
	if ctx.Err() != nil || status.Code(got) != codes.Unimplemented {
		t.Fatalf("Run returned after %v with Unsupported(%v); want it to return at once, told Unimplemented", ctx.Err(), got)
	}
}

// recreatedPod is a worker pod of attempt 3 of run llm that does not restart in place.
func recreatedPod() *corev1.Pod {
	p := makePod().worker("worker", "containerd://w2", running).obj()
	p.Spec.InitContainers = nil
	p.Labels = map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: "3"}
	return p
}

func TestRecreatedExitReport(t *testing.T) {
	notRun := recreatedPod()
	notRun.Labels = nil
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		st   *runtimeapi.ContainerStatus
		want *v1alpha1.WorkerExit
	}{
		"a worker of a run's pod exits 134": {
			pod: recreatedPod(), st: exitOf("w2", "worker", 134),
			want: &v1alpha1.WorkerExit{Attempt: 3, Container: "worker", ContainerID: "w2", ExitCode: 134, Reason: "Error",
				StartedAt: "2026-11-26T03:00:00Z", FinishedAt: "2026-11-26T03:01:30.000000123Z", Node: "n1"},
		},
		"exit 0":          {pod: recreatedPod(), st: exitOf("w2", "worker", 0)},
		"a sidecar":       {pod: recreatedPod(), st: exitOf("side", "sidecar", 1)},
		"a pod of no run": {pod: notRun, st: exitOf("w2", "worker", 1)},
		"a pod being deleted": {pod: func() *corev1.Pod { p := recreatedPod(); p.DeletionTimestamp = &metav1.Time{Time: finished}; return p }(),
			st: exitOf("w2", "worker", 143)},
		"another pod's container": {pod: func() *corev1.Pod { p := recreatedPod(); p.UID = "uid-9"; return p }(), st: exitOf("w2", "worker", 1)},
		"still running": {pod: recreatedPod(),
			st: func() *runtimeapi.ContainerStatus { s := exitOf("w2", "worker", 1); s.State = run; return s }()},
	} {
		t.Run(name, func(t *testing.T) {
			got, why, ok := RecreatedExitReport(tc.pod, tc.st, "n1")
			switch {
			case tc.want == nil && ok:
				t.Fatalf("reported %+v, want no report", got)
			case tc.want == nil && why == "":
				t.Error("no reason given for not reporting")
			case tc.want != nil && !ok:
				t.Fatalf("not reported (%s), want %+v", why, *tc.want)
			case tc.want != nil:
				if diff := cmp.Diff(*tc.want, got); diff != "" {
					t.Errorf("report (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A worker of a pod that does not restart in place is reported too (the pod's status keeps
// its exit, and only 2 KiB of its log): the report keeps its traceback from above the long
// abort that ends its log, which the kubelet's tail loses.
func TestExitWatcherRecreatedPod(t *testing.T) {
	pod := recreatedPod()
	var log strings.Builder
	log.WriteString("2026-11-26T03:01:00.000000000Z stderr F Traceback (most recent call last):\n")
	log.WriteString("2026-11-26T03:01:00.000000000Z stderr F   File \"/app/train.py\", line 121, in <module>\n")
	log.WriteString("2026-11-26T03:01:00.000000000Z stderr F RuntimeError: worker 2 fails on purpose\n")
	for i := range 60 {
		log.WriteString("2026-11-26T03:01:10.000000000Z stderr F     @     0x7f4c2612d7d4  absl::log_internal::LogMessage::SendToLog() frame " + strconv.Itoa(i) + "\n")
	}
	logPath := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(logPath, []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	st := exitOf("w2", "worker", 134)
	st.LogPath = logPath
	st.Annotations = map[string]string{termmsg.AnnotationPath: "/dev/termination-log", termmsg.AnnotationPolicy: string(corev1.TerminationMessageFallbackToLogsOnError)}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(pod); err != nil {
		t.Fatal(err)
	}
	src := &fakeEvents{FakeRuntime: &FakeRuntime{}, events: []*runtimeapi.ContainerEventResponse{
		{ContainerId: "w2", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ContainersStatuses: []*runtimeapi.ContainerStatus{st}},
	}}
	got := &reports{}
	noDecision := decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 0, false, false })
	w := NewExitWatcher(src, corelisters.NewPodLister(idx), noDecision, got, "n1", nil)
	if err := w.follow(context.Background()); err == nil {
		t.Fatal("follow returned no error at the stream's end")
	}
	if len(got.got) != 1 {
		t.Fatalf("reported %d exits, want the worker's", len(got.got))
	}
	ex := got.got[0]
	if ex.Attempt != 3 || ex.ExitCode != 134 || ex.ContainerID != "w2" {
		t.Errorf("report %+v, want attempt 3 (the pod's), exit 134 of w2", ex)
	}
	if !strings.Contains(ex.Message, "RuntimeError: worker 2 fails on purpose") || !strings.Contains(ex.Message, "frame 59") {
		t.Errorf("the report's message %q: want the traceback from above the tail, and the tail", ex.Message)
	}
}

// The runtime's start of a pod's barrier is told at once (BarrierStarted), not a worker's
// start, and not a container the lister has no pod of.
func TestExitWatcherToldOfBarrierStarts(t *testing.T) {
	pod := makePod().opened("attempt=1").worker("worker", "containerd://w1", exited143).obj()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := idx.Add(pod); err != nil {
		t.Fatal(err)
	}
	startOf := func(id, name, podName string) *runtimeapi.ContainerEventResponse {
		st := exitOf(id, name, 0)
		st.State, st.Labels["io.kubernetes.pod.name"] = run, podName
		return &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
			ContainersStatuses: []*runtimeapi.ContainerStatus{st}}
	}
	src := &fakeEvents{FakeRuntime: &FakeRuntime{}, events: []*runtimeapi.ContainerEventResponse{
		startOf("w2", "worker", "llm-0"), startOf("b2", v1alpha1.BarrierContainer, "llm-0"), startOf("b9", v1alpha1.BarrierContainer, "gone-0"),
	}}
	w := NewExitWatcher(src, corelisters.NewPodLister(idx), decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), &reports{}, "n1", nil)
	var told []string
	w.BarrierStarted = func(p *corev1.Pod) { told = append(told, p.Name) }
	if err := w.follow(context.Background()); err == nil {
		t.Fatal("follow returned no error at the stream's end")
	}
	if !cmp.Equal(told, []string{"llm-0"}) {
		t.Errorf("told of barrier starts in %v, want llm-0's alone", told)
	}
}

// sandboxStop is the event containerd sends when a pod's sandbox exits: the sandbox's own
// ID as the container's, its status, and the statuses of the pod's containers.
func sandboxStop(id string, state runtimeapi.PodSandboxState, containers ...*runtimeapi.ContainerStatus) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{
		ContainerId: id, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, CreatedAt: 1_700_000_000_000_000_000,
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: id, State: state,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "llm-1", Namespace: "ml", Uid: "uid-1"}},
		ContainersStatuses: containers,
	}
}

func TestPodStopped(t *testing.T) {
	running := exitOf("w1", "worker", 0)
	running.State = run
	unknown := exitOf("w1", "worker", 0)
	unknown.State = runtimeapi.ContainerState_CONTAINER_UNKNOWN
	notReady, ready := runtimeapi.PodSandboxState_SANDBOX_NOTREADY, runtimeapi.PodSandboxState_SANDBOX_READY
	for name, tc := range map[string]struct {
		ev   *runtimeapi.ContainerEventResponse
		want bool
	}{
		"the sandbox down, every container exited": {sandboxStop("s1", notReady, exitOf("w1", "worker", 143), exitOf("h1", "helper", 0)), true},
		"a container still running":                {sandboxStop("s1", notReady, exitOf("h1", "helper", 0), running), false},
		"a container the runtime cannot tell":      {sandboxStop("s1", notReady, unknown), false},
		"no container listed":                      {sandboxStop("s1", notReady), false},
		"the sandbox ready":                        {sandboxStop("s1", ready, exitOf("w1", "worker", 143)), false},
		"a container's stop": {func() *runtimeapi.ContainerEventResponse {
			ev := sandboxStop("s1", notReady, exitOf("w1", "worker", 143))
			ev.ContainerId = "w1"
			return ev
		}(), false},
		"a sandbox's start": {func() *runtimeapi.ContainerEventResponse {
			ev := sandboxStop("s1", notReady, exitOf("w1", "worker", 143))
			ev.ContainerEventType = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
			return ev
		}(), false},
		"no pod named": {func() *runtimeapi.ContainerEventResponse {
			ev := sandboxStop("s1", notReady, exitOf("w1", "worker", 143))
			ev.PodSandboxStatus.Metadata = nil
			return ev
		}(), false},
	} {
		t.Run(name, func(t *testing.T) {
			stop, ok := PodStopped(tc.ev)
			if ok != tc.want {
				t.Fatalf("PodStopped = %+v, %v; want %v", stop, ok, tc.want)
			}
			if want := (SandboxStop{Namespace: "ml", Name: "llm-1", UID: "uid-1", At: time.Unix(0, 1_700_000_000_000_000_000)}); ok && stop != want {
				t.Errorf("PodStopped = %+v, want %+v", stop, want)
			}
		})
	}
}

// The watcher tells of a pod's stop from its sandbox's event, and reads no exit from it.
func TestExitWatcherToldOfPodStops(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	src := &fakeEvents{FakeRuntime: &FakeRuntime{}, events: []*runtimeapi.ContainerEventResponse{
		sandboxStop("s1", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, exitOf("w1", "worker", 143)),
	}}
	got := &reports{}
	w := NewExitWatcher(src, corelisters.NewPodLister(idx), decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), got, "n1", nil)
	var told []SandboxStop
	w.PodStopped = func(_ context.Context, s SandboxStop) { told = append(told, s) }
	if err := w.follow(context.Background()); err == nil {
		t.Fatal("follow returned no error at the stream's end")
	}
	if len(told) != 1 || told[0].Name != "llm-1" || len(got.got) != 0 {
		t.Errorf("told of stops %+v, reported exits %+v; want llm-1's stop and no exit", told, got.got)
	}
}

// blockingReports holds the report of pod llm-0's first exit until another pod's report was
// made (or a second passed: the other pod's report waited behind it).
type blockingReports struct {
	reports
	other chan struct{}
	once  sync.Once
	// waited: the first report of llm-0 found the other pod's report made while it waited.
	waited bool
}

func (r *blockingReports) ReportWorkerExit(ctx context.Context, pod *corev1.Pod, ex v1alpha1.WorkerExit) error {
	if pod.Name == "llm-0" && ex.ContainerID == "a1" {
		select {
		case <-r.other:
			r.waited = true
		case <-time.After(time.Second):
		}
	} else if pod.Name != "llm-0" {
		// Made before llm-0's report is let go: else the two race to be recorded first.
		err := r.reports.ReportWorkerExit(ctx, pod, ex)
		r.once.Do(func() { close(r.other) })
		return err
	}
	return r.reports.ReportWorkerExit(ctx, pod, ex)
}

// A node shutting down ends its pods together: the watcher reports one pod's exit while
// another's report waits on the API server, and keeps each pod's exits in their order.
func TestExitWatcherReportsPodsAtOnce(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, name := range []string{"llm-0", "llm-1"} {
		p := makePod().opened("attempt=2").worker("worker", "containerd://x", running).obj()
		p.Name = name
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	exit := func(sandbox, pod, id string) *runtimeapi.ContainerEventResponse {
		st := exitOf(id, "worker", 143)
		st.Labels["io.kubernetes.pod.name"] = pod
		return &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
			PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: sandbox}, ContainersStatuses: []*runtimeapi.ContainerStatus{st}}
	}
	src := &fakeEvents{FakeRuntime: &FakeRuntime{}, events: []*runtimeapi.ContainerEventResponse{
		exit("s0", "llm-0", "a1"), exit("s0", "llm-0", "a2"), exit("s1", "llm-1", "b1"),
	}}
	got := &blockingReports{other: make(chan struct{})}
	w := NewExitWatcher(src, corelisters.NewPodLister(idx), decisionsFunc(func(*corev1.Pod) (int, bool, bool) { return 2, true, true }), got, "n1", nil)
	if err := w.follow(context.Background()); err == nil {
		t.Fatal("follow returned no error at the stream's end")
	}
	if !got.waited {
		t.Error("llm-1's exit was reported only after llm-0's report returned, want at once")
	}
	var order []string
	for _, ex := range got.got {
		order = append(order, ex.ContainerID)
	}
	if want := []string{"b1", "a1", "a2"}; !cmp.Equal(want, order) {
		t.Errorf("reported %v, want %v (llm-0's exits in their order, after llm-1's)", order, want)
	}
}
