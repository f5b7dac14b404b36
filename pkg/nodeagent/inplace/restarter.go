package inplace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
)

// EndpointNone turns restarts in place off on the node (nodeagent --cri-endpoint=none).
const EndpointNone = "none"

// RuntimeSocket is where a container runtime puts its CRI socket, relative to the node's root.
type RuntimeSocket struct {
	Runtime, Path string
}

// RuntimeSockets are the places the agent looks for the node's CRI socket when none is given,
// in order: containerd's (the GPU Operator's and most managed platforms' runtime), then
// CRI-O's (OpenShift), at the paths their packages and the kubelet's defaults use.
var RuntimeSockets = []RuntimeSocket{
	{Runtime: "containerd", Path: "run/containerd/containerd.sock"},
	{Runtime: "CRI-O", Path: "var/run/crio/crio.sock"},
	{Runtime: "CRI-O", Path: "run/crio/crio.sock"},
}

// FindEndpoint is the CRI endpoint ("unix:///path") of the first of RuntimeSockets that is a
// socket under hostRoot (the node's root as the agent sees it; "" is "/"), "" if none is;
// tried says where it looked, for the node's word on why it has no restarts in place.
func FindEndpoint(hostRoot string) (endpoint string, tried []string) {
	if hostRoot == "" {
		hostRoot = "/"
	}
	for _, s := range RuntimeSockets {
		p := filepath.Join(hostRoot, s.Path)
		tried = append(tried, p+" ("+s.Runtime+")")
		if info, err := os.Stat(p); err == nil && info.Mode()&os.ModeSocket != 0 {
			return "unix://" + p, tried
		}
	}
	return "", tried
}

// Runtime is the part of the CRI runtime service the restarter uses: these four calls and
// nothing else (docs/in-place-restart.md, "Least privilege"). runtimeapi's client is one.
type Runtime interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error)
	ExecSync(ctx context.Context, in *runtimeapi.ExecSyncRequest, opts ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error)
}

var _ Runtime = runtimeapi.RuntimeServiceClient(nil)

// ErrNoRuntime is Dial's error when the node's container runtime cannot be reached: the
// node restarts no pod in place (the agent runs on without it).
var ErrNoRuntime = errors.New("no container runtime")

// ErrStale is OpenBarrier's error when the pod's barrier refused the attempt as not newer
// than the one the pod ran before (barrier.ErrStale): the decision is older than the pod.
var ErrStale = barrier.ErrStale

// The barrier's exit codes for open (cmd/faultline-barrier), read through ExecSync.
const (
	openExitStale      = 3
	openExitNotWaiting = 4
	// openExitOpenedBefore: none listens, and the attempt file holds the attempt (or a
	// later one): the barrier opened for it already.
	openExitOpenedBefore = 5
)

// BarrierRecorder writes the agent's record of a barrier open onto its pod, against the
// resourceVersion the pod was read at (the agent's Writer): a barrier in the worker
// container is opened only once its record is written. RecordStopped adds to the record
// that names containerID that the agent stopped that container for attempt n
// (BarrierRecord.StoppedFor), and writes nothing where the pod's record names another
// container, or says so already.
type BarrierRecorder interface {
	RecordBarrier(ctx context.Context, pod *corev1.Pod, rec v1alpha1.BarrierRecord) error
	RecordStopped(ctx context.Context, pod *corev1.Pod, containerID string, n int, save *v1alpha1.BarrierSave) error
}

// AmendStopped writes into rec that containerID was stopped for attempt n, with the worker's
// last save (nil: none known), where rec names that container for an earlier attempt and
// does not say so already; it reports whether it did.
func AmendStopped(rec *v1alpha1.BarrierRecord, containerID string, n int, save *v1alpha1.BarrierSave) bool {
	if rec.ContainerID != containerID || int(rec.Attempt) >= n || int(rec.StoppedFor) >= n {
		return false // another container's, or said so already
	}
	rec.StoppedFor = int32(n)
	if save != nil {
		rec.LastSave = save
	}
	return true
}

// recordOf is a save as the barrier record keeps it.
func recordOf(s *barrier.Save) *v1alpha1.BarrierSave {
	if s == nil {
		return nil
	}
	return &v1alpha1.BarrierSave{Step: s.Step, At: s.At.UTC().Format(time.RFC3339Nano)}
}

// Restarter stops old workers and opens barriers through the node's container runtime.
type Restarter struct {
	rt     Runtime
	exits  ExitSource
	closer io.Closer
	log    *slog.Logger
	// Records writes the record of a barrier in the worker container before its open; nil
	// opens none of those.
	Records BarrierRecorder
	// Confirm, when set, reads the pod's decision from the API server after the record of
	// an open and before the open (ConfirmEach), for a worker container this agent has not
	// seen open: the loop's confirmation came before the record, and the controller, having
	// read the records a moment before it, may have moved the run on meanwhile, counting
	// that container as waiting (TestOpenBarrierInWorkerConfirmsAfterItsRecord).
	Confirm Confirm
	// opened are the worker containers whose barrier this agent has seen open for their
	// recorded attempt (Sync makes sure of the others once).
	opened openedSet
	// ExecTimeout bounds the barrier's open, through its socket or an exec (it answers in
	// milliseconds).
	ExecTimeout time.Duration
	// ProcRoot is where the node's processes are seen (/proc: the agent in the node's PID
	// namespace), through which the go signal reaches a barrier's socket without an exec;
	// "" execs always.
	ProcRoot string
	// Clock stamps the record of an open (BarrierRecord.OpenedAt).
	Clock clock.PassiveClock
	// execNoted: why the agent execs was logged once. socketWorks: a go signal went
	// through a barrier's socket (the agent sees the node's processes).
	execNoted, socketWorks atomic.Bool
}

// How a barrier got its go signal (Step.Via): through its socket, or an exec of its open.
// How a stop reached a supervised worker: through its barrier's socket, or, that out of
// reach, through the runtime's stop of its container (ViaRuntime), which the kubelet then
// restarts.
const (
	ViaSocket  = "socket"
	ViaExec    = "exec"
	ViaRuntime = "runtime"
)

// errNoSocket: the agent cannot reach a barrier's socket (openBySocket); it execs.
// errProcessGone, with it: the runtime says the container has ended, or no process has the
// PID it names for the container, which has ended, or runs in a PID namespace the agent does
// not see. An ended barrier is not opened again, by exec or otherwise: an exec into it would
// report its exit 0 as a second open.
var (
	errNoSocket    = errors.New("the barrier's socket is out of reach")
	errProcessGone = errors.New("no such process")
)

// errOpenedBefore: no barrier waits on a barrier's socket and its attempt file holds the
// attempt asked for, or a later one: it opened for it before (a barrier in the worker
// container runs that attempt's worker, and answers an open so). Nothing to do.
var errOpenedBefore = errors.New("it opened for the attempt before")

// errNotYet: a barrier's container runs and nobody listens on its socket yet (or any more:
// opened a moment ago, the runtime not yet seeing its end). The loop asks again, quietly.
var errNotYet = errors.New("it runs and does not listen for its go signal yet")

// New is a Restarter over rt.
func New(rt Runtime, log *slog.Logger) *Restarter {
	if log == nil {
		log = slog.Default()
	}
	exits, _ := rt.(ExitSource)
	return &Restarter{rt: rt, exits: exits, log: log, ExecTimeout: 10 * time.Second, ProcRoot: "/proc", Clock: clock.RealClock{}}
}

// Dial connects to the CRI runtime at endpoint ("unix:///path") and checks that it answers;
// its error wraps ErrNoRuntime when it does not.
func Dial(ctx context.Context, endpoint string, log *slog.Logger) (*Restarter, *runtimeapi.VersionResponse, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return nil, nil, fmt.Errorf("CRI endpoint %q: want unix:///path", endpoint)
	}
	// gRPC would retry a missing socket in the background and report only "unavailable".
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoRuntime, err)
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrNoRuntime, endpoint, err)
	}
	client := runtimeapi.NewRuntimeServiceClient(conn)
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := client.Version(vctx, &runtimeapi.VersionRequest{})
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: %s does not answer the CRI: %v", ErrNoRuntime, endpoint, err)
	}
	r := New(client, log)
	r.closer = conn
	return r, v, nil
}

// Exits is the runtime's exit events (ExitWatcher), through the restarter's connection;
// nil for a restarter over a runtime that has none.
func (r *Restarter) Exits() ExitSource { return r.exits }

// Close closes the runtime connection of a Restarter from Dial.
func (r *Restarter) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}

// Sync does for pod what Decide says for the gang's decision (attempt, and whether the
// gang's barrier is open), and returns the action it took (ActionNone or ActionWait when
// it did nothing). It is what the agent runs for each of its node's in-place pods whenever
// the pod or its run's decision changes; being idempotent, it may run again for the same
// state.
func (r *Restarter) Sync(ctx context.Context, pod *corev1.Pod, attempt int, barrierOpen bool) (Action, error) {
	d := Decide(pod, attempt, barrierOpen)
	switch d.Action {
	case ActionStopWorkers:
		_, err := r.StopOldWorkers(ctx, pod, attempt)
		return d.Action, err
	case ActionOpenBarrier:
		_, err := r.OpenBarrier(ctx, pod, attempt)
		return d.Action, err
	case ActionNone:
		if d.Recorded != "" && !r.opened.has(openedKey(d.Recorded, attempt)) {
			// Recorded for the attempt, and opened unless an agent stopped between its
			// record and its open: the open again opens it, or finds it opened.
			_, err := r.OpenBarrier(ctx, pod, attempt)
			return d.Action, err
		}
	}
	return d.Action, nil
}

// BarrierRunning says whether the runtime runs pod's barrier container now, whatever the
// pod's status says yet (an error: no).
func (r *Restarter) BarrierRunning(ctx context.Context, pod *corev1.Pod) bool {
	name, place := attempt.BarrierContainer(&pod.Spec)
	if place == attempt.NoBarrier {
		return false
	}
	running, err := r.running(ctx, pod, name)
	if err != nil {
		return false
	}
	rec := attempt.BarrierRecord(pod)
	// A worker container whose barrier is its entrypoint waits there unless it is the one
	// the record names.
	return slices.ContainsFunc(running, func(c *runtimeapi.Container) bool {
		return place == attempt.BarrierInit || rec == nil || rec.ContainerID != c.Id
	})
}

// StopOldWorkers stops, with the pod's termination grace period, the running workers of
// pod that belong to an attempt older than n (Decide), and returns the runtime IDs it
// stopped: through the runtime (the kubelet then restarts the pod in place), or, where the
// barrier supervises its worker, through the barrier, which ends the worker and waits
// again in the same container. A worker already stopped, or gone, is left alone: none is
// stopped twice by a second call, and a status read before the pod restarted never stops
// the new workers.
func (r *Restarter) StopOldWorkers(ctx context.Context, pod *corev1.Pod, n int) ([]string, error) {
	d := Decide(pod, n, false)
	if d.Action != ActionStopWorkers {
		r.log.Debug("no old worker to stop", "pod", podRef(pod), "attempt", n, "reason", d.Reason)
		return nil, nil
	}
	want := map[string]bool{}
	for _, id := range d.Containers {
		want[id] = true
	}
	running, err := r.running(ctx, pod, "")
	if err != nil {
		return nil, err
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	workers := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		workers[c.Name] = true
	}
	_, place := attempt.BarrierContainer(&pod.Spec)
	supervised := place == attempt.BarrierInWorker
	var stopped []string
	var save *barrier.Save // the recorded container's worker's last save
	for _, c := range running {
		if !want[c.Id] || !workers[c.Labels[kubelettypes.KubernetesContainerNameLabel]] {
			continue
		}
		if supervised {
			// Its barrier ends the worker and waits again in the same container: no
			// restart for the kubelet to make. Where its socket cannot be reached (no
			// hostPID; or a pod an older controller made whose barrier became the
			// worker and listens no more), the container is stopped as any other, and
			// the kubelet restarts it.
			saved, err := r.stopBySocket(ctx, c.Id, n, time.Duration(grace)*time.Second)
			if err == nil {
				if len(d.Containers) == 1 && c.Id == d.Containers[0] {
					save = saved
				}
				noteVia(ctx, ViaSocket, "")
				stopped = append(stopped, c.Id)
				continue
			}
			if !errors.Is(err, errNoSocket) && !errors.Is(err, barrier.ErrNotWaiting) {
				return stopped, fmt.Errorf("stop the worker of container %s of pod %s through its barrier: %w", c.Id, podRef(pod), err)
			}
			// On the step's trace too: a restart that restarts containers it need not is
			// slower by the kubelet's relist and restart, and says why.
			noteVia(ctx, ViaRuntime, err.Error())
			r.log.Info("stopping a supervised worker's container: its barrier is not reachable", "pod", podRef(pod), "container", c.Id, "reason", err)
		}
		// SIGTERM, then SIGKILL after the grace period: the worker's exit (143 or 137) is
		// non-zero, so its rule restarts every container of the pod in place. The call
		// returns once the container stopped.
		if _, err := r.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: grace}); err != nil {
			if status.Code(err) == codes.NotFound {
				continue // removed meanwhile: the kubelet is restarting the pod already
			}
			return stopped, fmt.Errorf("stop container %s of pod %s: %w", c.Id, podRef(pod), err)
		}
		stopped = append(stopped, c.Id)
	}
	if len(stopped) > 0 {
		r.log.Info("stopped old workers", "pod", podRef(pod), "attempt", n, "containers", stopped, "reason", d.Reason)
	}
	noteStopped(ctx)
	if err := r.recordStopped(ctx, pod, d, n, save); err != nil {
		return stopped, err
	}
	return stopped, nil
}

// recordStopped tells the controller, where pod's barrier is its worker's entrypoint, that
// the worker d named (the recorded container) runs no more: the runtime has stopped it, or
// lists it no longer running. The controller may open the gang's barrier on it, before the
// kubelet's relist, restart of the pod and status write show it (Barrier.Stopped). With an
// init container, the kubelet's status tells.
func (r *Restarter) recordStopped(ctx context.Context, pod *corev1.Pod, d Decision, n int, save *barrier.Save) error {
	if _, place := attempt.BarrierContainer(&pod.Spec); place != attempt.BarrierInWorker || len(d.Containers) != 1 || r.Records == nil {
		return nil
	}
	if err := r.Records.RecordStopped(ctx, pod, d.Containers[0], n, recordOf(save)); err != nil {
		return fmt.Errorf("record the stop of container %s of pod %s: %w", d.Containers[0], podRef(pod), err)
	}
	return nil
}

// OpenBarrier gives the go signal of attempt to pod's barrier if it runs, and says whether
// it opened. The runtime, not the pod's status, says whether the barrier runs: the status
// follows it by the kubelet's relist and status write. A barrier that is not running
// (opened already, or not started) is left alone; one that refuses the attempt as stale
// (the pod ran it already) returns ErrStale. The signal goes through the barrier's socket
// (openBySocket) where the agent can reach it, else through an exec of the barrier's open
// in its container; the step's Via says which.
//
// A barrier in the worker container is opened only once the agent's record of the open is
// on the pod (openRecorded), and the API server, read after it, still says so (Confirm).
func (r *Restarter) OpenBarrier(ctx context.Context, pod *corev1.Pod, n int) (bool, error) {
	if d := Decide(pod, n, true); d.Action == ActionNone && d.Recorded == "" {
		r.log.Debug("no barrier to open", "pod", podRef(pod), "attempt", n, "reason", d.Reason)
		return false, nil
	}
	name, place := attempt.BarrierContainer(&pod.Spec)
	running, err := r.running(ctx, pod, name)
	if err != nil {
		return false, err
	}
	opened := false
	for _, c := range running {
		if place == attempt.BarrierInWorker {
			if ok, err := r.openRecorded(ctx, pod, c, n); !ok || err != nil {
				return opened, err
			}
			if ok, err := r.stillDecided(ctx, pod, c.Id, n); !ok || err != nil {
				return opened, err
			}
		}
		ok, via, why, err := r.open(ctx, pod, c.Id, n, attempt.HandedIndex(pod), barrierBinary(place))
		if err != nil {
			return opened, err
		}
		if place == attempt.BarrierInWorker {
			r.opened.add(openedKey(c.Id, n))
		}
		if ok {
			opened = true
			noteVia(ctx, via, why)
			r.log.Info("opened the barrier", "pod", podRef(pod), "attempt", n, "container", c.Id, "via", via, "why", why)
		}
	}
	return opened, nil
}

// openRecorded says whether worker container c of pod, whose barrier is its entrypoint, is
// to be opened for attempt n, having written the record of that open first where the pod
// has none for c (v1alpha1.BarrierRecord): once a container is recorded, it is opened for
// its recorded attempt only, and the record is never written again for it.
func (r *Restarter) openRecorded(ctx context.Context, pod *corev1.Pod, c *runtimeapi.Container, n int) (bool, error) {
	b := attempt.BarrierOf(pod)
	rec := b.Record
	switch {
	case rec != nil && rec.ContainerID == c.Id && rec.StoppedFor > rec.Attempt && n >= int(rec.StoppedFor):
		// A supervising barrier whose worker the agent stopped waits again in the same
		// container: the record of this open replaces the stop's, before the open.
		if r.Records == nil {
			return false, fmt.Errorf("barrier %s of pod %s supervises its worker, and this agent cannot record its open", c.Id, podRef(pod))
		}
		next := *rec
		next.Attempt = int32(n)
		next.OpenedAt = r.Clock.Now().UTC().Format(time.RFC3339Nano)
		if err := r.Records.RecordBarrier(ctx, pod, next); err != nil {
			return false, err
		}
		return true, nil
	case rec != nil && rec.ContainerID == c.Id:
		if int(rec.Attempt) != n {
			r.log.Info("not opening a barrier recorded for another attempt", "pod", podRef(pod), "container", c.Id, "recorded", rec.Attempt, "attempt", n)
		}
		return int(rec.Attempt) == n, nil
	case rec != nil && int(rec.Attempt) >= n:
		// An earlier container ran the attempt: this one's barrier refuses it (Decide).
		r.log.Debug("not opening a barrier for an attempt its pod ran in an earlier container", "pod", podRef(pod), "container", c.Id, "recorded", rec.Attempt, "attempt", n)
		return false, nil
	case rec != nil && rec.Restart >= int32(c.GetMetadata().GetAttempt()):
		// The record names a later container than the one the runtime lists (or another of
		// the same number): this one is not to be opened, whatever the lists say.
		return false, fmt.Errorf("barrier %s of pod %s: restart %d, and the pod's record names container %s of restart %d", c.Id, podRef(pod), c.GetMetadata().GetAttempt(), rec.ContainerID, rec.Restart)
	case r.Records == nil:
		return false, fmt.Errorf("barrier %s of pod %s is in its worker container, and this agent cannot record its open", c.Id, podRef(pod))
	}
	next := v1alpha1.BarrierRecord{ContainerID: c.Id, Restart: int32(c.GetMetadata().GetAttempt()), Attempt: int32(n),
		OpenedAt: r.Clock.Now().UTC().Format(time.RFC3339Nano)}
	if err := r.Records.RecordBarrier(ctx, pod, next); err != nil {
		return false, err
	}
	return true, nil
}

// stillDecided says whether the API server, read after container id of pod was recorded
// opened for attempt n, still has the gang's barrier open for n (Confirm): a run that moved
// on meanwhile leaves the container waiting, and its record of an open it never had is
// stopped for the next attempt as any other.
func (r *Restarter) stillDecided(ctx context.Context, pod *corev1.Pod, id string, n int) (bool, error) {
	if r.Confirm == nil || r.opened.has(openedKey(id, n)) {
		return true, nil
	}
	live, open, ok, err := r.Confirm(ctx, pod)
	if err != nil {
		return false, fmt.Errorf("confirm the go signal of container %s of pod %s after its record: %w", id, podRef(pod), err)
	}
	if !ok || !open || live != n {
		r.log.Info("the run moved on after the record of an open: not opening", "pod", podRef(pod), "container", id,
			"recorded", n, "attempt", live, "barrierOpen", open, "decided", ok)
		return false, nil
	}
	return true, nil
}

// barrierBinary is where a barrier's container holds the barrier's program.
func barrierBinary(place attempt.BarrierPlace) string {
	if place == attempt.BarrierInWorker {
		return v1alpha1.BarrierBinary
	}
	return barrier.Binary
}

// open gives the go signal of attempt to barrier container id, through its socket or else
// an exec of binary's open, and says whether it opened, how, and why by exec. A barrier
// that opened for attempt before (one in the worker container, which runs on as the
// worker) is not opened again: ok is false, with no error. index is the index the open
// hands a warm spare (attempt.HandedIndex).
func (r *Restarter) open(ctx context.Context, pod *corev1.Pod, id string, attempt, index int, binary string) (ok bool, via, why string, err error) {
	err = fmt.Errorf("%w: no /proc to reach it through", errNoSocket)
	if r.ProcRoot != "" {
		err = r.openBySocket(ctx, id, attempt, index)
	}
	switch {
	case err == nil:
		r.socketWorks.Store(true)
		return true, ViaSocket, "", nil
	case errors.Is(err, errProcessGone) && (r.socketWorks.Load() || r.hasExited(ctx, id)):
		// The barrier has ended (opened by an earlier call), as the runtime says or as the
		// agent, which reaches barriers' processes, sees it: the runtime and the pod's status
		// may still show it running for a moment.
		return false, ViaSocket, "", nil
	case errors.Is(err, errOpenedBefore):
		return false, ViaSocket, "", nil
	case errors.Is(err, barrier.ErrStale):
		return false, ViaSocket, "", fmt.Errorf("barrier %s of pod %s: %w", id, podRef(pod), err)
	case errors.Is(err, barrier.ErrNotWaiting):
		return false, ViaSocket, "", r.notWaiting(ctx, pod, id)
	case !errors.Is(err, errNoSocket):
		// Sent without a clear answer: its exit code says whether it opened.
		if exited, code, serr := r.exited(ctx, id); serr == nil && exited {
			return code == 0, ViaSocket, "", nil
		}
		return false, ViaSocket, "", fmt.Errorf("the go signal to barrier %s of pod %s: %w", id, podRef(pod), err)
	}
	if r.execNoted.CompareAndSwap(false, true) {
		r.log.Info("giving barriers their go signal by exec", "reason", err)
	} else {
		r.log.Debug("giving a barrier its go signal by exec", "pod", podRef(pod), "container", id, "reason", err)
	}
	why = err.Error()
	ok, err = r.openByExec(ctx, pod, id, attempt, index, binary)
	return ok, ViaExec, why, err
}

// openByExec gives the go signal by an exec of the barrier's open (binary) in its container.
func (r *Restarter) openByExec(ctx context.Context, pod *corev1.Pod, id string, attempt, index int, binary string) (bool, error) {
	cmd := []string{binary, "open", "--attempt", strconv.Itoa(attempt)}
	if index >= 0 {
		cmd = append(cmd, "--index", strconv.Itoa(index))
	}
	resp, err := r.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(r.ExecTimeout / time.Second)})
	switch {
	case err == nil && resp.ExitCode == 0:
		return true, nil
	case err == nil && resp.ExitCode == openExitOpenedBefore:
		return false, nil
	case err == nil && resp.ExitCode == openExitStale:
		return false, fmt.Errorf("barrier %s of pod %s: %w: %s", id, podRef(pod), ErrStale, strings.TrimSpace(string(resp.Stderr)))
	}
	// Any other outcome may be the barrier's own exit: it ends its container, and the
	// kernel kills an exec still there with it (the barrier waits for its open to exit
	// first, but cannot tell on every kernel). Its exit code says: only an opened
	// barrier exits 0.
	if exited, code, serr := r.exited(ctx, id); serr == nil && exited {
		return code == 0 && (err != nil || resp.ExitCode != openExitNotWaiting), nil
	}
	if err == nil && resp.ExitCode == openExitNotWaiting {
		return false, r.notWaiting(ctx, pod, id)
	}
	if err != nil {
		return false, fmt.Errorf("exec %q in the barrier %s of pod %s: %w", cmd, id, podRef(pod), err)
	}
	return false, fmt.Errorf("barrier %s of pod %s: open exited %d: %s", id, podRef(pod), resp.ExitCode, strings.TrimSpace(string(resp.Stderr)))
}

// notWaiting is the outcome of an open that found no barrier listening in container id: none
// once the container has ended (opened by an earlier call, on its way out); errNotYet while it
// runs, as a barrier that has not begun to listen yet does (the runtime's start event comes
// first): the loop asks again.
func (r *Restarter) notWaiting(ctx context.Context, pod *corev1.Pod, id string) error {
	if r.hasExited(ctx, id) {
		return nil
	}
	return fmt.Errorf("barrier %s of pod %s: %w", id, podRef(pod), errNotYet)
}

// hasExited says whether the runtime says container id has exited.
func (r *Restarter) hasExited(ctx context.Context, id string) bool {
	exited, _, err := r.exited(ctx, id)
	return err == nil && exited
}

// exited says whether container id has exited, and its exit code.
func (r *Restarter) exited(ctx context.Context, id string) (bool, int32, error) {
	resp, err := r.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return false, 0, err
	}
	st := resp.GetStatus()
	return st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED, st.GetExitCode(), nil
}

// running lists pod's running containers (named name, or all if name is empty) by the
// labels the kubelet puts on every container.
func (r *Restarter) running(ctx context.Context, pod *corev1.Pod, name string) ([]*runtimeapi.Container, error) {
	sel := map[string]string{kubelettypes.KubernetesPodUIDLabel: string(pod.UID)}
	if name != "" {
		sel[kubelettypes.KubernetesContainerNameLabel] = name
	}
	resp, err := r.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: sel,
	}})
	if err != nil {
		return nil, fmt.Errorf("list the containers of pod %s: %w", podRef(pod), err)
	}
	return resp.Containers, nil
}

func podRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// openedKey names the open of container id for attempt n in an openedSet: a supervising
// barrier opens in the same container for each attempt.
func openedKey(id string, n int) string { return id + "/" + strconv.Itoa(n) }

// openedSet is a set of opens (openedKey), bounded: past openedMax it starts again empty (a
// container forgotten costs one more look at its barrier, no more).
type openedSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

const openedMax = 4096

func (s *openedSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil || len(s.ids) >= openedMax {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

func (s *openedSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}
