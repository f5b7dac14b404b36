package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpu"
	"github.com/faultline-dev/faultline/pkg/shutdown"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// DefaultQueueSize is how many GPU faults may wait for the agent. An XID storm fills it
// with repeats of one fault, so dropping beyond it loses nothing the first copy did not say.
const DefaultQueueSize = 256

// DefaultRepeatWindow is how long a fault that was fully handled is not handled again: an
// XID storm repeats one fault many times a second, and each would cost a kubelet List.
const DefaultRepeatWindow = 30 * time.Second

// markParallelism bounds concurrent pod writes: a shutdown marks every run pod of the node
// at once, and all of them must be marked before logind's delay runs out.
const markParallelism = 64

// AgentConfig configures an Agent. Node, Owners and Writer are required.
type AgentConfig struct {
	Node   string
	Owners GPUOwnerSource
	Writer EvidenceWriter
	// QueueSize bounds the GPU faults waiting to be handled; zero means DefaultQueueSize.
	QueueSize int
	// RepeatWindow: zero means DefaultRepeatWindow.
	RepeatWindow time.Duration
	Metrics      *Metrics
	// Tracing records the detect span of each fault episode and puts the episode's
	// traceparent on the pods with the evidence (nil: no tracing).
	Tracing *tracing.Provider
	// BootTime is when the node's kernel started (nil: /proc/stat's btime): a node marked
	// GPU-unhealthy before it has had every GPU reset since (a reboot resets them).
	BootTime func() (time.Time, error)
	// RebootCheckAfter is how long after Run starts the GPUs' health after a reboot is
	// judged: once the monitor's first poll has reported what it found (zero:
	// DefaultRebootCheckAfter).
	RebootCheckAfter time.Duration
	// Retry is how often a withdrawal that failed is tried again (zero: DefaultRetry).
	Retry  time.Duration
	Clock  clock.PassiveClock
	Logger *slog.Logger
	// Checkpoints, when set, holds a shutdown back until the node's workers whose runs ask
	// them to save on notice (spec.checkpoint) have answered (inplace.Checkpointer), for up
	// to CheckpointWait (the inhibitor's release timeout) less markReserve.
	Checkpoints interface {
		WaitNode(ctx context.Context, until time.Time) []string
		// SavesOnNotice reports whether the pod's run asks its workers to save on notice:
		// only those pods' marks wait.
		SavesOnNotice(pod types.NamespacedName) bool
	}
	CheckpointWait time.Duration
}

// markReserve is what a shutdown's wait for the workers' checkpoints leaves of the
// inhibitor's release timeout for the marks of the node's pods.
const markReserve = 2 * time.Second

// DefaultRebootCheckAfter: the monitor polls every GPU's health at once when it starts.
const DefaultRebootCheckAfter = 5 * time.Second

// DefaultRetry is how often a shutdown announcement that could not be taken back is tried
// again: a stale one would blame a shutdown that never came for later failures.
const DefaultRetry = 5 * time.Second

// faultKey identifies repeats of one fault.
type faultKey struct {
	uuid   string
	xid    uint64
	reason string
	source string
	// cleared: the health poll's report that the state is gone, not that it appeared.
	cleared bool
	// pod is the pod the kubelet reported the device of (a device fault); zero for NVML's.
	pod types.NamespacedName
}

// Agent turns GPU faults and shutdown announcements into evidence. It is the sink of a
// gpu.Monitor (OnGPUFault) and the Handler of a shutdown.Inhibitor.
type Agent struct {
	cfg    AgentConfig
	log    *slog.Logger
	faults chan gpu.Fault

	mu      sync.Mutex
	handled map[faultKey]time.Time // when each fault was last handled successfully
	// lost are the fatal states the health poll found on each GPU (uuid → reasons) and has
	// not reported cleared: the node is not healthy again while any is left.
	lost map[string]map[string]bool

	// The node's shutdown announcement and the pods' shutdown evidence are taken back when
	// logind cancels a shutdown and when the agent starts (a node that is up again): until
	// that is done, it is retried. shutdownMu orders it with a shutdown that starts meanwhile,
	// which wins.
	shutdownMu   sync.Mutex
	shuttingDown bool
	withdraw     bool // the node's announcement and the pods' evidence are still to be taken back

	resets chan time.Time
	// devices are the unhealthy devices the kubelet reports for the node's workers
	// (WatchDeviceHealth), waiting to be written.
	devices chan podDeviceFault
}

var _ shutdown.Handler = &Agent{}

// NewAgent checks cfg and fills in defaults.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Node == "" || cfg.Owners == nil || cfg.Writer == nil {
		return nil, errors.New("nodeagent: AgentConfig needs Node, Owners and Writer")
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.RepeatWindow <= 0 {
		cfg.RepeatWindow = DefaultRepeatWindow
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BootTime == nil {
		cfg.BootTime = procBootTime
	}
	if cfg.RebootCheckAfter <= 0 {
		cfg.RebootCheckAfter = DefaultRebootCheckAfter
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	return &Agent{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "nodeagent", "node", cfg.Node),
		faults:   make(chan gpu.Fault, cfg.QueueSize),
		devices:  make(chan podDeviceFault, cfg.QueueSize),
		handled:  map[faultKey]time.Time{},
		lost:     map[string]map[string]bool{},
		withdraw: true, // at start: whatever an earlier life announced is over
		resets:   make(chan time.Time, 1),
	}, nil
}

// OnGPUFault queues a fault for Run; it never blocks the GPU monitor.
func (a *Agent) OnGPUFault(f gpu.Fault) {
	select {
	case a.faults <- f:
	default:
		a.cfg.Metrics.faultDropped()
		a.log.Warn("GPU fault queue full; fault dropped", "gpu", f.UUID, "reason", f.Reason)
	}
}

// Run takes back a shutdown announcement left from before the node came up (and retries it
// until it is done, as after a cancelled shutdown), handles queued GPU faults in order (the
// first evidence on a pod wins), and an operator's GPU resets, until ctx is done. Once the
// monitor's first poll is in, a node marked GPU-unhealthy before it last booted is healthy
// again if no GPU is lost now.
func (a *Agent) Run(ctx context.Context) error {
	// The kubelet's word on devices is written by a loop of its own: nothing on its path
	// (a pod's write, its retries) ever holds back the evidence of an XID.
	devicesDone := make(chan struct{})
	go func() {
		defer close(devicesDone)
		a.runDeviceFaults(ctx)
	}()
	defer func() { <-devicesDone }()
	retry := time.NewTicker(a.cfg.Retry)
	defer retry.Stop()
	rebootCheck := time.After(a.cfg.RebootCheckAfter)
	a.takeBack(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-a.faults:
			if err := a.HandleGPUFault(ctx, f); err != nil {
				a.log.Error("GPU fault evidence incomplete", "gpu", f.UUID, "reason", f.Reason, "error", err)
			}
		case <-retry.C:
			a.takeBack(ctx)
		case <-rebootCheck:
			a.gpusAfterReboot(ctx)
		case at := <-a.resets:
			a.gpusReset(ctx, at)
		}
	}
}

// takeBack withdraws the shutdown announcement from the node and the shutdown evidence from
// the run pods that still run, if that is still to be done and no shutdown has started.
func (a *Agent) takeBack(ctx context.Context) {
	a.shutdownMu.Lock()
	defer a.shutdownMu.Unlock()
	if !a.withdraw || a.shuttingDown {
		return
	}
	errs := []error{a.cfg.Writer.ClearShutdown(ctx)}
	pods, err := a.cfg.Writer.RunPods(ctx)
	errs = append(errs, err)
	for _, ref := range pods {
		if _, err := a.cfg.Writer.WithdrawPod(ctx, ref); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Error("cannot take back a shutdown announcement yet; retrying", "every", a.cfg.Retry, "error", err)
		return
	}
	a.withdraw = false
}

// ResetRequested tells the agent that an operator reset the node's GPUs (or replaced them)
// at at: the node is healthy again unless the health poll still finds a GPU lost.
func (a *Agent) ResetRequested(at time.Time) {
	select {
	case a.resets <- at:
	default: // one pending is enough
	}
}

// gpusReset acts on an operator's reset at at: whatever the node was marked for before it, it
// is healthy again, unless a GPU is lost now.
func (a *Agent) gpusReset(ctx context.Context, at time.Time) {
	if lost := a.lostGPUs(); lost > 0 {
		a.log.Warn("GPU reset requested, but the health poll still finds GPUs lost or needing a reset: GPUHealthy stays False", "gpus", lost, "requestedAt", at)
		return
	}
	// The GPUs are good again as of the reset: a fault after it is a new one, whichever fault
	// was handled before it, not a repeat to count only (a fault handled before the reset
	// would otherwise go unmarked on the pods that hold the GPU now, for RepeatWindow).
	a.mu.Lock()
	for k, handled := range a.handled {
		if handled.Before(at) {
			delete(a.handled, k)
		}
	}
	a.mu.Unlock()
	msg := fmt.Sprintf("an operator reset the GPUs (%s at %s)", v1alpha1.AnnotationGPUResetRequestedAt, formatTime(at))
	if _, err := a.cfg.Writer.MarkGPUHealthy(ctx, func(_ string, since time.Time) bool { return at.After(since) }, msg, a.cfg.Clock.Now()); err != nil {
		a.log.Error("cannot mark the node's GPUs healthy after a reset", "error", err)
	}
}

// gpusAfterReboot: a reboot resets every GPU, so a node marked unhealthy before it booted
// is healthy again if the health poll found no GPU lost since.
func (a *Agent) gpusAfterReboot(ctx context.Context) {
	boot, err := a.cfg.BootTime()
	if err != nil {
		a.log.Warn("cannot read the node's boot time: GPUs marked unhealthy before a reboot stay so until an operator's reset", "error", err)
		return
	}
	if a.lostGPUs() > 0 {
		return
	}
	msg := fmt.Sprintf("every GPU healthy after the node booted at %s", formatTime(boot))
	if _, err := a.cfg.Writer.MarkGPUHealthy(ctx, func(_ string, since time.Time) bool { return since.Before(boot) }, msg, a.cfg.Clock.Now()); err != nil {
		a.log.Error("cannot mark the node's GPUs healthy after a reboot", "error", err)
	}
}

func (a *Agent) lostGPUs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lost)
}

// gpuBack: the health poll no longer finds a fatal state it had found. Once no GPU has one,
// a node marked unhealthy for such a state (not an XID, which nothing takes back) is healthy
// again.
func (a *Agent) gpuBack(ctx context.Context, f gpu.Fault) error {
	a.mu.Lock()
	delete(a.lost[f.UUID], f.Reason)
	if len(a.lost[f.UUID]) == 0 {
		delete(a.lost, f.UUID)
	}
	left := len(a.lost)
	a.mu.Unlock()
	if left > 0 {
		return nil
	}
	msg := fmt.Sprintf("GPU %d (%s): %s no longer found by the health poll [%s]", f.Index, f.UUID, f.Reason, formatTime(f.DetectedAt))
	_, err := a.cfg.Writer.MarkGPUHealthy(ctx, func(reason string, _ time.Time) bool { return healthState(reason) }, msg, f.DetectedAt)
	return err
}

// healthState: a node reason that a health poll found (and can see clear).
func healthState(reason string) bool {
	switch reason {
	case v1alpha1.GPUReasonGPULost, v1alpha1.GPUReasonResetRequired, v1alpha1.GPUReasonRowRemapFailure:
		return true
	}
	return false
}

// procBootTime is the kernel's boot time (btime in /proc/stat; in a container, the host's).
func procBootTime() (time.Time, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat btime %q: %w", v, err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat has no btime")
}

// HandleGPUFault marks the run pods holding the GPU, then, for a fatal infrastructure
// fault, the node. A repeat of a fault handled within RepeatWindow is only counted.
//
// A state the health poll found marks pods only when fatal: pages pending retirement do not
// stop a program (the ECC error that caused them came as an event of its own), and marking
// would blame the GPU for whatever ends those pods later.
func (a *Agent) HandleGPUFault(ctx context.Context, f gpu.Fault) error {
	a.cfg.Metrics.eventSeen(f.Source)
	key := faultKey{uuid: f.UUID, xid: f.XID, reason: f.Reason, source: f.Source, cleared: f.Cleared}
	now := a.cfg.Clock.Now()
	if a.handledRecently(key, now) {
		return nil
	}
	a.log.Info("GPU fault", "gpu", f.UUID, "index", f.Index, "xid", f.XID, "cause", f.Cause, "fatal", f.Fatal, "reason", f.Reason, "source", f.Source, "detail", f.Detail, "cleared", f.Cleared)
	if f.Cleared {
		err := a.gpuBack(ctx, f)
		if err == nil {
			a.handledNow(key, now)
		}
		return err
	}
	if f.Source == v1alpha1.EvidenceSourceNVMLHealth && f.Fatal {
		a.mu.Lock()
		if a.lost[f.UUID] == nil {
			a.lost[f.UUID] = map[string]bool{}
		}
		a.lost[f.UUID][f.Reason] = true
		a.mu.Unlock()
	}

	var errs []error
	if f.Source != v1alpha1.EvidenceSourceNVMLHealth || f.Fatal {
		owners, err := a.cfg.Owners.GPUOwners(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("map GPU %s to pods: %w", f.UUID, err))
		}
		ev := GPUEvidence(a.cfg.Node, f)
		eps := newEpisodes(a.cfg.Tracing)
		errs = append(errs, a.markPods(withEpisodes(ctx, eps), owners.Pods(f.UUID, f.Index), ev))
		eps.record(ctx, ev, f.DetectedAt)
	}
	if f.Fatal && isInfrastructure(f.Cause) {
		if err := a.cfg.Writer.MarkGPUUnhealthy(ctx, f.Reason, nodeMessage(f), f.DetectedAt); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		a.handledNow(key, now)
	}
	return err
}

// handledRecently: the fault was handled successfully within the repeat window before now
// (an XID storm, or a kubelet that keeps reporting a device Unhealthy, repeats one fault).
func (a *Agent) handledRecently(key faultKey, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, seen := a.handled[key]
	return seen && now.Sub(last) < a.cfg.RepeatWindow
}

// handledNow notes that the fault was handled successfully at now.
func (a *Agent) handledNow(key faultKey, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handled[key] = now
	for k, t := range a.handled { // keep the map small
		if now.Sub(t) >= a.cfg.RepeatWindow {
			delete(a.handled, k)
		}
	}
}

// ShutdownStarted annotates the node and marks every run pod on it: logind's delay is short
// and the kubelet is already stopping the pods. Where the node's workers belong to runs that
// save on notice (spec.checkpoint), the annotation is the controller's notice, and the marks,
// which end those workers' attempts, wait for their answers (Checkpoints), bounded.
func (a *Agent) ShutdownStarted(ctx context.Context, detectedAt time.Time) error {
	a.shutdownMu.Lock()
	a.shuttingDown, a.withdraw = true, false
	a.shutdownMu.Unlock()
	a.cfg.Metrics.eventSeen(v1alpha1.EvidenceSourceLogind)
	var wg sync.WaitGroup
	var nodeErr error
	wg.Go(func() { nodeErr = a.cfg.Writer.AnnotateShutdown(ctx, detectedAt) })
	pods, err := a.cfg.Writer.RunPods(ctx)
	var podErr error
	if err == nil {
		// The workers of runs that save on notice are marked once they answered: the
		// announcement on the node is the controller's notice, which asks their gangs to
		// save, and their evidence ends their attempts. Every other pod is marked at once.
		now, saving := pods, []types.NamespacedName(nil)
		if a.cfg.Checkpoints != nil {
			now, saving = nil, nil
			for _, p := range pods {
				if a.cfg.Checkpoints.SavesOnNotice(p) {
					saving = append(saving, p)
				} else {
					now = append(now, p)
				}
			}
		}
		ev := ShutdownEvidence(a.cfg.Node, detectedAt)
		eps := newEpisodes(a.cfg.Tracing)
		ectx := withEpisodes(ctx, eps)
		podErr = a.markPods(ectx, now, ev)
		if len(saving) > 0 {
			a.waitForSaves(ctx, detectedAt)
			podErr = errors.Join(podErr, a.markPods(ectx, saving, ev))
		}
		eps.record(ctx, ev, detectedAt)
	}
	wg.Wait()
	return errors.Join(nodeErr, err, podErr)
}

// waitForSaves waits, up to the inhibitor's release timeout less markReserve from
// detectedAt, until the node's workers whose runs save on notice answered their requests.
func (a *Agent) waitForSaves(ctx context.Context, detectedAt time.Time) {
	wait := a.cfg.CheckpointWait - markReserve
	if wait <= 0 {
		return
	}
	if left := a.cfg.Checkpoints.WaitNode(ctx, detectedAt.Add(wait)); len(left) > 0 {
		a.log.Warn("the shutdown goes on before these workers said they saved", "pods", left, "waited", wait)
		return
	}
	a.log.Info("the node's workers answered their checkpoint requests", "after", a.cfg.Clock.Since(detectedAt).Round(time.Millisecond))
}

// ShutdownCancelled takes the announcement back: off the node, and off the run pods that
// are still running. What fails is retried by Run until it is done.
func (a *Agent) ShutdownCancelled(ctx context.Context, _ time.Time) error {
	a.shutdownMu.Lock()
	a.shuttingDown, a.withdraw = false, true
	a.shutdownMu.Unlock()
	a.takeBack(ctx)
	a.shutdownMu.Lock()
	defer a.shutdownMu.Unlock()
	if a.withdraw {
		return errors.New("the shutdown announcement is not taken back yet: retrying")
	}
	return nil
}

// markPods writes ev to the pods in parallel; a pod that is gone is no error.
func (a *Agent) markPods(ctx context.Context, pods []types.NamespacedName, ev v1alpha1.FaultEvidence) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, markParallelism)
	)
	for _, ref := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := a.cfg.Writer.MarkPod(ctx, ref, ev)
			if err != nil && !apierrors.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func nodeMessage(f gpu.Fault) string {
	gpuName := "an unidentified GPU"
	if f.UUID != "" {
		gpuName = fmt.Sprintf("GPU %d (%s)", f.Index, f.UUID)
	}
	return fmt.Sprintf("%s: %s [%s, detected %s]", gpuName, f.Detail, f.Source, formatTime(f.DetectedAt))
}
