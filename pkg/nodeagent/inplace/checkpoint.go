package inplace

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/barrier"
	"github.com/faultline-dev/faultline/pkg/checkpoint"
)

// CheckpointRecorder adds a worker's answer to a checkpoint request to its pod's barrier
// record (the agent's Writer, or heartbeat.Records): where the record names containerID
// opened for attempt n (AmendCheckpoint).
type CheckpointRecorder interface {
	RecordCheckpoint(ctx context.Context, pod *corev1.Pod, containerID string, n int, ck v1alpha1.BarrierCheckpoint) error
}

// AmendCheckpoint writes ck into rec where rec names containerID opened for attempt n and
// holds no answer to ck's request yet; it reports whether it did.
func AmendCheckpoint(rec *v1alpha1.BarrierRecord, containerID string, n int, ck v1alpha1.BarrierCheckpoint) bool {
	if rec.ContainerID != containerID || int(rec.Attempt) != n || rec.Checkpoint != nil && rec.Checkpoint.RequestedAt == ck.RequestedAt {
		return false
	}
	rec.Checkpoint = &ck
	return true
}

// RunStore is the agent's cache of the runs of its node's pods (runwatch.Set).
type RunStore interface {
	GetByKey(key string) (item any, exists bool, err error)
}

// Checkpointer carries a run's checkpoint request (TrainingRunStatus.Checkpoint) out on the
// node's workers: each worker of the attempt asked whose barrier supervises it is asked
// through its barrier's socket (barrier.Checkpoint: its signal, and the worker's word that
// it saved), once per request, and its answer recorded on its barrier record, where the
// controller reads it. It also tells the agent's shutdown handler when its node's workers
// have answered (WaitNode): the node's shutdown waits for them.
type Checkpointer struct {
	Restarter *Restarter
	Records   CheckpointRecorder
	// Pods are the node's pods, read with their records.
	Pods  corelisters.PodLister
	Runs  RunStore
	Clock clock.PassiveClock
	Log   *slog.Logger

	mu sync.Mutex
	// asked are the requests in flight or answered, by pod UID and request (checkpoint.Key),
	// kept until their deadline has passed.
	asked map[string]asked
}

// asked is a worker's request: its answer (nil while in flight), and its deadline.
type asked struct {
	answer   *v1alpha1.BarrierCheckpoint
	deadline time.Time
}

// RunChanged asks the node's workers of the run namespace/name when it holds a request that
// has not reached them.
func (c *Checkpointer) RunChanged(ctx context.Context, namespace, name string) {
	run := c.run(namespace, name)
	if run == nil {
		return
	}
	req := checkpoint.Current(run)
	signal, _, ok := checkpoint.Policy(run)
	if req == nil || !ok || req.EndedAt != nil || !c.Clock.Now().Before(req.Deadline.Time) {
		return
	}
	c.forgetPast()
	for _, pod := range c.podsOf(run) {
		rec, ok := c.askable(pod, req)
		if !ok {
			continue
		}
		key := string(pod.UID) + "/" + checkpoint.Key(req)
		c.mu.Lock()
		if c.asked == nil {
			c.asked = map[string]asked{}
		}
		_, seen := c.asked[key]
		if !seen {
			c.asked[key] = asked{deadline: req.Deadline.Time}
		}
		c.mu.Unlock()
		if !seen {
			go c.ask(ctx, key, pod, rec.ContainerID, req, signal)
		}
	}
}

// forgetPast forgets the requests whose deadline (and recordGrace) has passed: their answers
// are on the records, or too late.
func (c *Checkpointer) forgetPast() {
	now := c.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, a := range c.asked {
		if now.After(a.deadline.Add(recordGrace)) {
			delete(c.asked, k)
		}
	}
}

func (c *Checkpointer) run(namespace, name string) *v1alpha1.TrainingRun {
	obj, ok, err := c.Runs.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	run, _ := obj.(*v1alpha1.TrainingRun)
	return run
}

// podsOf are run's pods on the node (by its UID: a pod of another run of the name is not
// its).
func (c *Checkpointer) podsOf(run *v1alpha1.TrainingRun) []*corev1.Pod {
	pods, err := c.Pods.Pods(run.Namespace).List(labels.SelectorFromSet(labels.Set{v1alpha1.LabelRunUID: string(run.UID)}))
	if err != nil {
		return nil
	}
	return pods
}

// askable is pod's barrier record when its worker is one req asks and has not answered: its
// barrier supervises it, and its record says it runs req's attempt.
func (c *Checkpointer) askable(pod *corev1.Pod, req *v1alpha1.CheckpointStatus) (*v1alpha1.BarrierRecord, bool) {
	if pod.DeletionTimestamp != nil || checkpoint.AnswerOf(req, pod) != nil {
		return nil, false
	}
	b := attempt.BarrierOf(pod)
	if b.Place != attempt.BarrierInWorker || b.Record == nil || b.Record.Attempt != req.Attempt || !(b.OpenedFor(req.Attempt) || b.RecordedRunning(req.Attempt)) {
		return nil, false
	}
	return b.Record, true
}

// ask asks pod's barrier (container id) to have its worker save for req, and records the
// answer, the barrier's or why it could not be asked.
func (c *Checkpointer) ask(ctx context.Context, key string, pod *corev1.Pod, id string, req *v1alpha1.CheckpointStatus, signal string) {
	log := c.Log.With("pod", pod.Namespace+"/"+pod.Name, "attempt", req.Attempt)
	timeout := req.Deadline.Sub(c.Clock.Now())
	log.Info("asking the worker to save", "signal", signal, "timeout", timeout.Round(time.Millisecond))
	a, err := c.Restarter.checkpointBySocket(ctx, id, int(req.Attempt), signal, timeout)
	ck := v1alpha1.BarrierCheckpoint{RequestedAt: checkpoint.Key(req), At: c.Clock.Now().UTC().Format(time.RFC3339Nano),
		Saved: a.Saved, Step: a.Step, Reason: a.Reason}
	if a.Exit != nil {
		ck.ExitCode = ptr.To(int32(*a.Exit))
	}
	switch {
	case errors.Is(err, errNoSocket):
		ck.Reason = "the node agent cannot reach its barrier's socket (the agent needs the node's PID namespace, hostPID): " + err.Error()
	case errors.Is(err, barrier.ErrStale):
		ck.Reason = "its barrier runs another attempt: " + err.Error()
	case err != nil:
		ck.Reason = "its barrier did not answer: " + err.Error()
	}
	log.Info("the worker answered", "saved", ck.Saved, "step", ck.Step, "reason", ck.Reason)
	c.mu.Lock()
	c.asked[key] = asked{answer: &ck, deadline: req.Deadline.Time}
	c.mu.Unlock()
	// The answer must reach the controller: retried until the request's deadline.
	rctx, cancel := context.WithDeadline(ctx, req.Deadline.Time.Add(recordGrace))
	defer cancel()
	for {
		err := c.Records.RecordCheckpoint(rctx, pod, id, int(req.Attempt), ck)
		if err == nil || rctx.Err() != nil {
			if err != nil {
				log.Warn("the worker's answer is not recorded", "error", err)
			}
			return
		}
		select {
		case <-rctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		if p, err := c.Pods.Pods(pod.Namespace).Get(pod.Name); err == nil && p.UID == pod.UID {
			pod = p // read again: the record may have changed (a conflict)
		}
	}
}

// recordGrace is how long after a request's deadline an answer is still written: the
// controller closes the request at the deadline, and an answer that came in time belongs
// in its record.
const recordGrace = 10 * time.Second

// WaitNode waits until every worker on the node whose run asks its workers to save on notice
// (spec.checkpoint) has answered its run's request, or the request's deadline passed, or
// until; it returns the pods still waited for then ("namespace/name").
func (c *Checkpointer) WaitNode(ctx context.Context, until time.Time) []string {
	for {
		left := c.unanswered()
		if len(left) == 0 || !c.Clock.Now().Before(until) {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SavesOnNotice reports whether the node's pod ref belongs to a running attempt of a run
// with spec.checkpoint whose worker its barrier supervises: the controller asks it to save
// on a notice, and a node's shutdown waits for its answer.
func (c *Checkpointer) SavesOnNotice(ref types.NamespacedName) bool {
	pod, err := c.Pods.Pods(ref.Namespace).Get(ref.Name)
	if err != nil {
		return false
	}
	_, ok := c.saving(pod)
	return ok
}

// saving is pod's run when pod is a worker that saves on notice (SavesOnNotice).
func (c *Checkpointer) saving(pod *corev1.Pod) (*v1alpha1.TrainingRun, bool) {
	run := c.run(pod.Namespace, pod.Labels[v1alpha1.LabelRun])
	if run == nil || string(run.UID) != pod.Labels[v1alpha1.LabelRunUID] || pod.DeletionTimestamp != nil || run.DeletionTimestamp != nil ||
		run.Status.Phase != v1alpha1.PhaseRunning {
		return nil, false
	}
	if _, _, ok := checkpoint.Policy(run); !ok {
		return nil, false
	}
	b := attempt.BarrierOf(pod)
	if b.Place != attempt.BarrierInWorker || !(b.OpenedFor(run.Status.Attempt) || b.RecordedRunning(run.Status.Attempt)) {
		return nil, false // nothing of this attempt runs there to save
	}
	return run, true
}

// unanswered are the node's workers that save on notice and have not answered their run's
// request (or none was made yet), before its deadline.
func (c *Checkpointer) unanswered() []string {
	pods, err := c.Pods.List(labels.Everything())
	if err != nil {
		return nil
	}
	var left []string
	now := c.Clock.Now()
	for _, pod := range pods {
		run, ok := c.saving(pod)
		if !ok {
			continue
		}
		req := checkpoint.Current(run)
		switch {
		case req == nil:
			left = append(left, pod.Namespace+"/"+pod.Name) // not asked yet
		case !now.Before(req.Deadline.Time) || req.EndedAt != nil:
		case checkpoint.AnswerOf(req, pod) != nil:
		default:
			c.mu.Lock()
			a := c.asked[string(pod.UID)+"/"+checkpoint.Key(req)]
			c.mu.Unlock()
			if a.answer == nil {
				left = append(left, pod.Namespace+"/"+pod.Name)
			}
		}
	}
	return left
}
