package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// The progress watch (spec.failurePolicy.progressDeadlineSeconds): a gang can hang without a
// fault anyone sees (a deadlock in the input pipeline, a collective that never completes, a
// stuck filesystem). The zero-configuration sign of a worker's progress is its own output:
// the watch notes, for each running worker of a run with a deadline on this node, when its
// log last grew, and when that is longer ago than the deadline it says so on the pod (the
// NoProgress condition), once; it takes the condition off when the worker writes again. The
// controller ends an attempt every worker of which carries it (pkg/exitclass, "Progress").
// Its cost: a stat of each running worker's log directory per period, and no API write
// until a worker has been silent for its deadline.

// DefaultPodLogDir is where the kubelet keeps its pods' logs (its podLogsDir), as
// <namespace>_<pod>_<uid>/<container>/<restart>.log.
const DefaultPodLogDir = "/var/log/pods"

// DefaultProgressPeriod is how often the watch looks at its node's workers' logs. A stall is
// said at most this long after its deadline (at least 30 s: the CRD's minimum).
const DefaultProgressPeriod = 5 * time.Second

// ProgressWriter writes what the progress watch finds onto a pod of the node: Writer.
type ProgressWriter interface {
	// MarkNoProgress puts the NoProgress condition on pod: no progress since since.
	MarkNoProgress(ctx context.Context, pod *corev1.Pod, since time.Time, message string) error
	// MarkProgressUnknown puts it on as Unknown: the worker's log cannot be read.
	MarkProgressUnknown(ctx context.Context, pod *corev1.Pod, message string) error
	// ClearNoProgress takes it off.
	ClearNoProgress(ctx context.Context, pod *corev1.Pod) error
	// MarkProgressing puts the Progressing condition on pod: its incarnation's first output
	// at at.
	MarkProgressing(ctx context.Context, pod *corev1.Pod, at time.Time) error
}

var _ ProgressWriter = &Writer{}

// ProgressConfig configures a ProgressWatch. Node, Pods and Writer are required.
type ProgressConfig struct {
	Node string
	// Pods is the agent's cache of its node's pods (NodePodInformer).
	Pods   corelisters.PodLister
	Writer ProgressWriter
	// LogDir is the kubelet's pod log directory; "" is DefaultPodLogDir.
	LogDir string
	// Period: zero is DefaultProgressPeriod.
	Period time.Duration
	Clock  clock.PassiveClock
	Logger *slog.Logger
}

// ProgressWatch watches the progress of its node's workers (see above).
type ProgressWatch struct {
	cfg ProgressConfig
	log *slog.Logger

	mu sync.Mutex
	// written is what the watch last wrote on each pod. The cache lags behind its own
	// writes: without this a write would be repeated until the cache shows it.
	written map[types.UID]progressMark
	// first is what the watch knows of each pod's first progress (firstoutput.go).
	first map[types.UID]firstLook
}

// progressMark is the NoProgress condition the watch wrote on a pod: True since since,
// Unknown, or (the zero value) none.
type progressMark struct {
	since   time.Time
	unknown bool
}

// NewProgressWatch checks cfg and fills in defaults.
func NewProgressWatch(cfg ProgressConfig) (*ProgressWatch, error) {
	if cfg.Node == "" || cfg.Pods == nil || cfg.Writer == nil {
		return nil, errors.New("nodeagent: ProgressConfig needs Node, Pods and Writer")
	}
	if cfg.LogDir == "" {
		cfg.LogDir = DefaultPodLogDir
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultProgressPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ProgressWatch{cfg: cfg, log: cfg.Logger.With("component", "progress", "node", cfg.Node), written: map[types.UID]progressMark{}, first: map[types.UID]firstLook{}}, nil
}

// Run checks the node's workers every period until ctx is done.
func (w *ProgressWatch) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.Check(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("progress of the node's workers not fully written; trying again next period", "error", err)
			}
		}
	}
}

// Check looks once at every run pod of the node that has a progress deadline.
func (w *ProgressWatch) Check(ctx context.Context) error {
	req, err := labels.NewRequirement(v1alpha1.LabelRun, selection.Exists, nil)
	if err != nil {
		return err
	}
	pods, err := w.cfg.Pods.List(labels.NewSelector().Add(*req))
	if err != nil {
		return fmt.Errorf("list the node's run pods: %w", err)
	}
	present := map[types.UID]bool{}
	var errs []error
	for _, p := range pods {
		present[p.UID] = true
		if err := w.checkPod(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	w.mu.Lock()
	for uid := range w.written {
		if !present[uid] {
			delete(w.written, uid) // a pod gone: nothing to remember
		}
	}
	for uid := range w.first {
		if !present[uid] {
			delete(w.first, uid)
		}
	}
	w.mu.Unlock()
	return errors.Join(errs...)
}

// checkPod marks or clears one pod, if its state calls for a write.
func (w *ProgressWatch) checkPod(ctx context.Context, pod *corev1.Pod) error {
	deadline, ok := progressDeadline(pod)
	if !ok || pod.Spec.NodeName != w.cfg.Node {
		return nil
	}
	running := runningWorkers(pod)
	if len(running) == 0 || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil // no worker runs: nothing to make progress
	}
	ref := pod.Namespace + "/" + pod.Name
	prev := w.marked(pod)
	out, unreadable := lastOutput(w.cfg.LogDir, pod, running)
	if unreadable != nil {
		// A log the agent cannot read says nothing of the worker: unknown, never silence
		// (a wrong --pod-log-dir would otherwise stall every gang of the node).
		if prev.unknown {
			return nil
		}
		msg := fmt.Sprintf("node %s: %v; the worker's progress is unknown (the agent's --pod-log-dir is %s: it must be the kubelet's podLogsDir, mounted into the agent)", w.cfg.Node, unreadable, w.cfg.LogDir)
		if err := w.cfg.Writer.MarkProgressUnknown(ctx, pod, msg); err != nil {
			return err
		}
		w.remember(pod.UID, progressMark{unknown: true})
		w.log.Warn("a worker's log cannot be read: its progress is unknown", "pod", ref, "error", unreadable)
		return nil
	}
	now := w.cfg.Clock.Now()
	st := progressOf(pod, running, out, deadline, now)
	// The first progress's write failing holds back no stall's.
	firstErr := w.firstProgress(ctx, pod, running, earliestStart(running), out)
	return errors.Join(firstErr, w.markStall(ctx, pod, ref, prev, st, deadline))
}

// markStall writes or takes off pod's NoProgress condition where its worker's progress st
// differs from what the pod carries (prev).
func (w *ProgressWatch) markStall(ctx context.Context, pod *corev1.Pod, ref string, prev progressMark, st progress, deadline time.Duration) error {
	switch {
	case st.Silent && !prev.since.IsZero() && sameSecond(prev.since, st.Since):
		return nil // said already
	case st.Silent:
		if err := w.cfg.Writer.MarkNoProgress(ctx, pod, st.Since, st.message(deadline)); err != nil {
			return err
		}
		w.remember(pod.UID, progressMark{since: st.Since})
		w.log.Info("a worker has shown no progress for its run's deadline", "pod", ref,
			"since", st.Since.UTC().Format(time.RFC3339), "deadline", deadline)
	case prev != (progressMark{}):
		if err := w.cfg.Writer.ClearNoProgress(ctx, pod); err != nil {
			return err
		}
		w.remember(pod.UID, progressMark{})
		w.log.Info("a worker progresses again", "pod", ref, "lastOutput", st.Since.UTC().Format(time.RFC3339))
	}
	return nil
}

// marked is the NoProgress condition the pod carries: what the watch wrote last, else what
// the cache shows.
func (w *ProgressWatch) marked(pod *corev1.Pod) progressMark {
	w.mu.Lock()
	m, known := w.written[pod.UID]
	w.mu.Unlock()
	if known {
		return m
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != v1alpha1.PodConditionNoProgress {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			return progressMark{since: c.LastTransitionTime.Time}
		case corev1.ConditionUnknown:
			return progressMark{unknown: true}
		}
	}
	return progressMark{}
}

func (w *ProgressWatch) remember(uid types.UID, m progressMark) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written[uid] = m
}

// earliestStart is when the first of the running containers began its incarnation.
func earliestStart(running map[string]time.Time) time.Time {
	var out time.Time
	for _, at := range running {
		if out.IsZero() || at.Before(out) {
			out = at
		}
	}
	return out
}

// sameSecond: the condition keeps its time to the second.
func sameSecond(a, b time.Time) bool { return a.Truncate(time.Second).Equal(b.Truncate(time.Second)) }

// progressDeadline is the pod's progress deadline (v1alpha1.AnnotationProgressDeadline); false
// when it has none, or an unreadable one.
func progressDeadline(pod *corev1.Pod) (time.Duration, bool) {
	raw, ok := pod.Annotations[v1alpha1.AnnotationProgressDeadline]
	if !ok {
		return 0, false
	}
	s, err := strconv.Atoi(raw)
	if err != nil || s <= 0 {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}

// runningWorkers are the pod's containers that run a worker, with when each began its
// current attempt (attempt.RunningWorkers: not its init containers, nor a barrier in the
// worker's container while it waits; a supervising barrier's worker from its recorded open).
func runningWorkers(pod *corev1.Pod) map[string]time.Time {
	out := map[string]time.Time{}
	for _, w := range attempt.RunningWorkers(pod) {
		out[w.Container] = w.Since
	}
	return out
}

// lastOutput is when any of the running containers' logs last grew (the latest
// modification time of their current log files), zero when none has written yet. The logs
// are the kubelet's: <dir>/<namespace>_<pod>_<uid>/<container>/<restart>.log; the files it
// rotated out (<restart>.log.<time>, maybe compressed) are older than the current one. The
// kubelet makes a container's log directory before the runtime starts it, so a running
// container's directory that cannot be read is an error (unreadable), never silence.
func lastOutput(dir string, pod *corev1.Pod, running map[string]time.Time) (last time.Time, unreadable error) {
	podDir := filepath.Join(dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	for name := range running {
		entries, err := os.ReadDir(filepath.Join(podDir, name))
		if err != nil {
			return time.Time{}, fmt.Errorf("cannot read the log of container %s: %w", name, err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".log") || e.IsDir() {
				continue
			}
			info, err := os.Stat(filepath.Join(podDir, name, e.Name()))
			// An empty log is the runtime's, made at the container's start: no output yet.
			if err == nil && info.Size() > 0 && info.ModTime().After(last) {
				last = info.ModTime()
			}
		}
	}
	return last, nil
}

// progress is what the watch knows of one worker's progress.
type progress struct {
	// Since is its last progress: the latest of its log's last growth and its running
	// containers' starts (a worker that just started has made none to miss yet).
	Since time.Time
	// Silent: Since is at least the deadline ago.
	Silent bool
	// Containers are the running containers whose logs were read, sorted.
	Containers []string
	// Output: Since is its output's, not a start.
	Output bool
}

// progressOf decides on one worker: its running containers (name → start), when their logs
// last grew (zero: never), its deadline and the time. Pure.
func progressOf(pod *corev1.Pod, running map[string]time.Time, lastOutput time.Time, deadline time.Duration, now time.Time) progress {
	p := progress{Since: lastOutput, Output: !lastOutput.IsZero()}
	for name, started := range running {
		p.Containers = append(p.Containers, name)
		if started.After(p.Since) {
			p.Since, p.Output = started, false
		}
	}
	if p.Since.IsZero() {
		p.Since = pod.CreationTimestamp.Time
	}
	slices.Sort(p.Containers)
	p.Silent = !p.Since.IsZero() && now.Sub(p.Since) >= deadline
	return p
}

// message is the NoProgress condition's message: which logs, since when, the deadline.
func (p progress) message(deadline time.Duration) string {
	what := "no output in the log of container " + strings.Join(p.Containers, ", ")
	if len(p.Containers) > 1 {
		what = "no output in the logs of containers " + strings.Join(p.Containers, ", ")
	}
	from := "since " + formatTime(p.Since)
	if !p.Output {
		from = "since it started at " + formatTime(p.Since)
	}
	return fmt.Sprintf("%s %s: the run's progress deadline is %s", what, from, deadline)
}

// MarkNoProgress puts the NoProgress condition on pod (see ProgressWriter): one status patch,
// with the pod's UID as its precondition.
func (w *Writer) MarkNoProgress(ctx context.Context, pod *corev1.Pod, since time.Time, message string) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	return w.patchPod(ctx, pod, podMark{cond: noProgressCondition(since, message)}, v1alpha1.CauseNoProgress)
}

// MarkProgressUnknown puts the NoProgress condition on pod as Unknown (see ProgressWriter).
func (w *Writer) MarkProgressUnknown(ctx context.Context, pod *corev1.Pod, message string) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	return w.patchPod(ctx, pod, podMark{cond: progressUnknownCondition(w.cfg.Clock.Now(), message)}, v1alpha1.CauseNoProgress)
}

// ClearNoProgress takes the NoProgress condition off pod (a no-op where it is not).
func (w *Writer) ClearNoProgress(ctx context.Context, pod *corev1.Pod) error {
	if err := w.ownRunPod(pod); err != nil {
		return err
	}
	return w.patchPod(ctx, pod, podMark{cond: noProgressConditionDelete()}, "progressing")
}

// ownRunPod refuses a pod that is not a run's on this node.
func (w *Writer) ownRunPod(pod *corev1.Pod) error {
	if pod.Spec.NodeName != w.cfg.Node {
		return fmt.Errorf("pod %s/%s on node %q, agent on %q: %w", pod.Namespace, pod.Name, pod.Spec.NodeName, w.cfg.Node, ErrOtherNode)
	}
	if _, ok := pod.Labels[v1alpha1.LabelRun]; !ok {
		return fmt.Errorf("pod %s/%s is no worker of a TrainingRun", pod.Namespace, pod.Name)
	}
	return nil
}

// noProgressCondition is NoProgress=True, for podMarkPatch: lastTransitionTime is the
// worker's last progress.
func noProgressCondition(since time.Time, message string) obj {
	return obj{
		"type":               v1alpha1.PodConditionNoProgress,
		"status":             corev1.ConditionTrue,
		"reason":             v1alpha1.ProgressSignalLog,
		"message":            message,
		"lastTransitionTime": metav1.NewTime(since),
	}
}

// progressUnknownCondition is NoProgress=Unknown, for podMarkPatch.
func progressUnknownCondition(at time.Time, message string) obj {
	return obj{
		"type":               v1alpha1.PodConditionNoProgress,
		"status":             corev1.ConditionUnknown,
		"reason":             v1alpha1.ProgressUnknownLog,
		"message":            message,
		"lastTransitionTime": metav1.NewTime(at),
	}
}

// noProgressConditionDelete removes NoProgress, for podMarkPatch.
func noProgressConditionDelete() obj {
	return obj{"type": v1alpha1.PodConditionNoProgress, "$patch": "delete"}
}
