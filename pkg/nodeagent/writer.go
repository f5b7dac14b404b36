package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/tracing"
)

// ErrOtherNode: the agent was asked to write to a pod that is not on its node.
var ErrOtherNode = errors.New("pod is not on this node")

// WriterConfig configures a Writer. Client and Node are required.
type WriterConfig struct {
	Client Kube
	// Node is the agent's own node: the only node, and the only pods, it writes to.
	Node string
	// Pods is the agent's cache of its node's pods (NodePodInformer); nil reads the API.
	Pods corelisters.PodLister
	// TaintUnhealthyGPU adds the NoSchedule taint v1alpha1.TaintGPUUnhealthy on a fatal GPU fault.
	TaintUnhealthyGPU bool
	// Backoff spaces retries; zero means DefaultBackoff.
	Backoff wait.Backoff
	Metrics *Metrics
	Clock   clock.PassiveClock
	Logger  *slog.Logger
}

// EvidenceWriter is what the Agent needs from a Writer.
type EvidenceWriter interface {
	MarkPod(ctx context.Context, ref types.NamespacedName, ev v1alpha1.FaultEvidence) (bool, error)
	WithdrawPod(ctx context.Context, ref types.NamespacedName) (bool, error)
	RunPods(ctx context.Context) ([]types.NamespacedName, error)
	MarkGPUUnhealthy(ctx context.Context, reason, message string, at time.Time) error
	MarkGPUHealthy(ctx context.Context, gone func(reason string, since time.Time) bool, message string, at time.Time) (bool, error)
	AnnotateShutdown(ctx context.Context, at time.Time) error
	ClearShutdown(ctx context.Context) error
}

var _ EvidenceWriter = &Writer{}

// Writer writes evidence onto the node's pods and onto the node.
type Writer struct {
	cfg WriterConfig
	log *slog.Logger

	mu sync.Mutex
	// written is the evidence this agent put on each pod. The cache lags behind our own
	// writes, and an XID storm reports the same fault many times a second: this keeps the
	// repeats off the API server.
	written map[types.UID]v1alpha1.FaultEvidence
	// withdrawn: pods whose shutdown evidence this agent took off; the cache may still
	// show it for a moment.
	withdrawn map[types.UID]bool
	// podLocks serialises the marks of one pod, so two faults do not race to be first.
	podLocks map[types.NamespacedName]*sync.Mutex
}

// NewWriter checks cfg and fills in defaults.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Client == nil || cfg.Node == "" {
		return nil, errors.New("nodeagent: WriterConfig needs Client and Node")
	}
	if cfg.Backoff.Steps == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Writer{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "evidence-writer", "node", cfg.Node),
		written:   map[types.UID]v1alpha1.FaultEvidence{},
		withdrawn: map[types.UID]bool{},
		podLocks:  map[types.NamespacedName]*sync.Mutex{},
	}, nil
}

// MarkPod puts ev on the pod: the InfrastructureFault condition for an infrastructure cause,
// and the evidence annotation for any cause. The first evidence stays unless ev supersedes
// it; marks already there are not written again. It reports whether it wrote anything.
// It refuses pods of other nodes (ErrOtherNode), leaves alone pods without the run label
// and pods that had finished before ev was detected, and gives up on a pod that is gone
// (an error for which apierrors.IsNotFound holds).
func (w *Writer) MarkPod(ctx context.Context, ref types.NamespacedName, ev v1alpha1.FaultEvidence) (bool, error) {
	unlock := w.lockPod(ref)
	defer unlock()

	detectedAt, err := time.Parse(time.RFC3339Nano, ev.DetectedAt)
	if err != nil {
		return false, fmt.Errorf("evidence for pod %s: detectedAt: %w", ref, err)
	}
	pod, err := w.getPod(ctx, ref)
	if err != nil {
		return false, err
	}
	if _, ok := pod.Labels[v1alpha1.LabelRun]; !ok || attempt.Spare(pod) {
		// No run's, or a warm spare's: it holds no index and runs no worker, and nothing
		// judges it (its node's facts keep it from taking an index); a write for it would
		// only delay those of the workers its node's fault ends.
		return false, nil
	}
	if finishedBefore(pod, detectedAt) {
		w.log.Debug("pod had finished before the fault; not marked", "pod", ref, "cause", ev.Cause)
		return false, nil
	}

	prev, known, remembered, withdrawn := w.previous(pod)
	if remembered && !supersedes(ev, prev) {
		return false, nil // what this agent wrote is on the pod, even if the cache lags
	}
	effective := ev
	if known && !supersedes(ev, prev) {
		effective = prev
	}
	since := detectedAt
	if t, err := time.Parse(time.RFC3339Nano, effective.DetectedAt); err == nil {
		since = t
	}

	// The cache may not show a condition this agent wrote a moment ago.
	condOn := (!withdrawn && hasInfraCondition(pod, effective.Cause)) || (remembered && prev.Cause == effective.Cause)
	var m podMark
	if isInfrastructure(effective.Cause) && !condOn {
		m.cond = infraCondition(effective, since)
	}
	var traceparent string
	eps := episodesFrom(ctx)
	if !known || !sameEvidence(effective, prev) {
		// The evidence starts a fault episode: its traceparent goes in the same patch, so
		// that the controller never sees one without the other.
		traceparent = tracing.Traceparent(eps.root(pod))
		if m.annotations, err = evidenceAnnotations(effective, traceparent); err != nil {
			return false, fmt.Errorf("evidence for pod %s: %w", ref, err)
		}
	}
	wrote := m.cond != nil || m.annotations != nil
	if wrote {
		if err := w.patchPod(ctx, pod, m, effective.Cause); err != nil {
			return false, err
		}
		if traceparent != "" {
			eps.written(pod, w.cfg.Clock.Now())
		}
	}
	w.mu.Lock()
	w.written[pod.UID] = effective
	delete(w.withdrawn, pod.UID)
	w.mu.Unlock()
	if wrote {
		w.cfg.Metrics.observeLatency(ev.Source, w.cfg.Clock.Since(detectedAt))
		w.log.Info("marked pod", "pod", ref, "cause", effective.Cause, "source", effective.Source, "detectedAt", effective.DetectedAt)
	}
	return wrote, nil
}

// previous is the evidence on the pod: what this agent wrote (remembered), else an
// annotation that an agent of this node wrote before it (see agentWrote), unless this agent
// withdrew it (withdrawn) and the cache may not show that yet.
func (w *Writer) previous(pod *corev1.Pod) (ev v1alpha1.FaultEvidence, known, remembered, withdrawn bool) {
	w.mu.Lock()
	ev, remembered = w.written[pod.UID]
	withdrawn = w.withdrawn[pod.UID]
	w.mu.Unlock()
	if remembered {
		return ev, true, true, withdrawn
	}
	if p := v1alpha1.EvidenceOf(pod.Annotations); p != nil && !withdrawn && w.agentWrote(pod, *p) {
		return *p, true, false, withdrawn
	}
	return v1alpha1.FaultEvidence{}, false, false, withdrawn
}

// agentWrote reports whether evidence found on a pod is an agent's of this node (this one
// before a restart): it names this node, and its InfrastructureFault condition, which only an
// agent writes (in the pod's status), stands beside it. Anything else may have been planted
// by whoever can edit the pod, to hide the evidence that the first-evidence rule would keep
// off: it is replaced, not kept.
func (w *Writer) agentWrote(pod *corev1.Pod, ev v1alpha1.FaultEvidence) bool {
	return ev.Node == w.cfg.Node && isInfrastructure(ev.Cause) && hasInfraCondition(pod, ev.Cause)
}

// WithdrawPod takes shutdown evidence off a pod that is still running after logind
// cancelled the shutdown; otherwise a later, unrelated failure of that pod would be blamed
// on a shutdown that never happened. A pod that stopped or is stopping keeps it: the
// announcement is what stopped it. Evidence of any other source stays.
func (w *Writer) WithdrawPod(ctx context.Context, ref types.NamespacedName) (bool, error) {
	unlock := w.lockPod(ref)
	defer unlock()
	pod, err := w.getPod(ctx, ref)
	if err != nil {
		return false, err
	}
	ev, known, _, _ := w.previous(pod)
	if !known || ev.Source != v1alpha1.EvidenceSourceLogind || !stillRunning(pod) {
		return false, nil
	}
	// The condition goes in the same write as the evidence, whether or not the cache shows
	// it: deleting a condition that is not there is a no-op, so a lagging cache costs nothing.
	m := podMark{cond: infraConditionDelete(), annotations: evidenceRemoval()}
	if err := w.patchPod(ctx, pod, m, "withdrawn"); err != nil {
		return false, err
	}
	w.mu.Lock()
	delete(w.written, pod.UID)
	w.withdrawn[pod.UID] = true
	w.mu.Unlock()
	w.log.Info("withdrew shutdown evidence", "pod", ref)
	return true, nil
}

// RunPods lists the pods on the node that belong to a TrainingRun.
func (w *Writer) RunPods(ctx context.Context) ([]types.NamespacedName, error) {
	req, err := labels.NewRequirement(v1alpha1.LabelRun, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	sel := labels.NewSelector().Add(*req)
	var pods []*corev1.Pod
	if w.cfg.Pods != nil {
		if pods, err = w.cfg.Pods.List(sel); err != nil {
			return nil, err
		}
	} else {
		list, err := w.cfg.Client.ListPods(ctx, metav1.ListOptions{
			LabelSelector: sel.String(),
			FieldSelector: nodeFieldSelector(w.cfg.Node),
		})
		if err != nil {
			return nil, fmt.Errorf("list run pods on %s: %w", w.cfg.Node, err)
		}
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
		}
	}
	var out []types.NamespacedName
	for _, p := range pods {
		if p.Spec.NodeName == w.cfg.Node { // the cache is filtered by node already; be sure
			out = append(out, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	return out, nil
}

func (w *Writer) lockPod(ref types.NamespacedName) func() {
	w.mu.Lock()
	l, ok := w.podLocks[ref]
	if !ok {
		l = &sync.Mutex{}
		w.podLocks[ref] = l
	}
	w.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Forget drops what the writer remembers about a deleted pod (the informer's delete
// handler calls it), so that memory does not grow with every pod the node ever ran.
func (w *Writer) Forget(ref types.NamespacedName, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.written, uid)
	delete(w.withdrawn, uid)
	delete(w.podLocks, ref)
}

// getPod reads the pod from the cache, or from the API when the cache does not have it yet
// (a pod created a moment ago), and refuses a pod of another node.
func (w *Writer) getPod(ctx context.Context, ref types.NamespacedName) (*corev1.Pod, error) {
	var pod *corev1.Pod
	var err error
	if w.cfg.Pods != nil {
		pod, err = w.cfg.Pods.Pods(ref.Namespace).Get(ref.Name)
	}
	if w.cfg.Pods == nil || apierrors.IsNotFound(err) {
		err = withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
			var gerr error
			pod, gerr = w.cfg.Client.GetPod(ctx, ref.Namespace, ref.Name)
			return gerr
		})
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s: %w", ref, err)
	}
	if pod.Spec.NodeName != w.cfg.Node {
		return nil, fmt.Errorf("pod %s on node %q, agent on %q: %w", ref, pod.Spec.NodeName, w.cfg.Node, ErrOtherNode)
	}
	return pod, nil
}

// podMark is what one write to a pod carries: the condition, the evidence, or both.
type podMark struct {
	cond, annotations obj
}

// targets are the metric targets the mark writes.
func (m podMark) targets() []string {
	var t []string
	if m.cond != nil {
		t = append(t, targetPodCondition)
	}
	if m.annotations != nil {
		t = append(t, targetPodAnnotation)
	}
	return t
}

// patchPod writes m in one request (podMarkPatch). It reads nothing first: the patch carries
// the pod's UID as its precondition, and the reply is all the agent learns of the pod.
func (w *Writer) patchPod(ctx context.Context, pod *corev1.Pod, m podMark, reason v1alpha1.Cause) error {
	data, err := podMarkPatch(pod.UID, m.cond, m.annotations)
	if err != nil {
		return fmt.Errorf("patch for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	err = withRetry(ctx, w.cfg.Backoff, func(ctx context.Context) error {
		return w.cfg.Client.PatchPodStatus(ctx, pod.Namespace, pod.Name, types.StrategicMergePatchType, data)
	})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			for _, t := range m.targets() {
				w.cfg.Metrics.markFailed(t)
			}
		}
		return fmt.Errorf("write evidence to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for _, t := range m.targets() {
		w.cfg.Metrics.markWritten(t, string(reason))
	}
	return nil
}

func hasInfraCondition(pod *corev1.Pod, cause v1alpha1.Cause) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1alpha1.PodConditionInfrastructureFault && c.Status == corev1.ConditionTrue && c.Reason == string(cause) {
			return true
		}
	}
	return false
}

// finishedSlack absorbs the second granularity of container timestamps, as exitclass does.
const finishedSlack = time.Second

// finishedBefore: the pod had stopped before the fault was seen, so the fault cannot have
// been its cause. A terminal pod whose stop time is unknown counts as stopped before.
func finishedBefore(pod *corev1.Pod, t time.Time) bool {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return false
	}
	var last time.Time
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if term := cs.State.Terminated; term != nil && term.FinishedAt.After(last) {
				last = term.FinishedAt.Time
			}
		}
	}
	return last.IsZero() || last.Add(finishedSlack).Before(t)
}

// stillRunning: not terminal and not being deleted.
func stillRunning(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}
