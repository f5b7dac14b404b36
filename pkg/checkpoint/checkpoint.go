// Package checkpoint holds the pure decisions of a checkpoint on notice (spec.checkpoint,
// docs/checkpoint.md): when a planned move asks an attempt's workers to save, what each
// worker answered (its node agent's record of what its barrier heard), and when the move may
// go on: every worker that can be asked has answered, or the deadline passed. It takes
// objects and returns answers; it never calls the API server.
//
// The request lives in the run's status (TrainingRunStatus.Checkpoint), where every node
// agent reads it and asks its node's workers through their barriers; each answer is written
// on the worker's barrier record (BarrierRecord.Checkpoint) naming the request it answers.
// Once the move goes on, the request, its answers and the workers that did not answer go to
// the attempt's record.
package checkpoint

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// DefaultTimeout is spec.checkpoint.timeoutSeconds's default (the CRD's): long enough for a
// sharded save of a large model to fast storage, short enough that a drain is not held for
// long by a program that does not answer.
const DefaultTimeout = v1alpha1.DefaultCheckpointTimeoutSeconds * time.Second

// DefaultSignal is spec.checkpoint.signal's default.
const DefaultSignal = v1alpha1.DefaultCheckpointSignal

// Policy is run's checkpoint policy with its defaults, and whether it has one.
func Policy(run *v1alpha1.TrainingRun) (signal string, timeout time.Duration, ok bool) {
	p := run.Spec.Checkpoint
	if p == nil {
		return "", 0, false
	}
	signal, timeout = p.Signal, time.Duration(p.TimeoutSeconds)*time.Second
	if signal == "" {
		signal = DefaultSignal
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return signal, timeout, true
}

// Request is the request to save that a notice about nodes makes of run's current attempt
// at now: its deadline is the policy's timeout from now, or the notice's own bound (allows,
// zero if none) if sooner.
func Request(run *v1alpha1.TrainingRun, notice string, nodes []string, now, allows time.Time) *v1alpha1.CheckpointStatus {
	_, timeout, _ := Policy(run)
	deadline := now.Add(timeout)
	if !allows.IsZero() && allows.Before(deadline) {
		deadline = allows
	}
	nodes = slices.Clone(nodes)
	slices.Sort(nodes)
	return &v1alpha1.CheckpointStatus{
		Attempt: run.Status.Attempt, RequestedAt: metav1.NewMicroTime(now), Deadline: metav1.NewMicroTime(deadline),
		Notice: notice, Nodes: slices.Compact(nodes),
	}
}

// GracePeriod is pod's termination grace period: how long a node's shutdown lets its worker
// save before the kubelet kills it (Kubernetes' default, 30 s, where the pod says none).
func GracePeriod(pod *corev1.Pod) time.Duration {
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// Current is run's request of its current attempt, nil if none.
func Current(run *v1alpha1.TrainingRun) *v1alpha1.CheckpointStatus {
	if c := run.Status.Checkpoint; c != nil && c.Attempt == run.Status.Attempt {
		return c
	}
	return nil
}

// Key is how a worker's answer names the request it answers (BarrierCheckpoint.RequestedAt).
func Key(req *v1alpha1.CheckpointStatus) string {
	return req.RequestedAt.UTC().Format(time.RFC3339Nano)
}

// AnswerOf is pod's answer to req as its agent recorded it, nil if none yet.
func AnswerOf(req *v1alpha1.CheckpointStatus, pod *corev1.Pod) *v1alpha1.BarrierCheckpoint {
	rec := attempt.BarrierRecord(pod)
	if rec == nil || rec.Attempt != req.Attempt || rec.Checkpoint == nil || rec.Checkpoint.RequestedAt != Key(req) {
		return nil
	}
	return rec.Checkpoint
}

// Progress is where a request stands among an attempt's workers.
type Progress struct {
	// Acks are the workers that said they saved.
	Acks []v1alpha1.CheckpointAck
	// Waiting are the indexes asked that have not answered yet.
	Waiting []int32
	// Missing are the indexes that will not say they saved: their answer says they did not
	// (the timeout, a stop, a barrier out of reach), or they cannot be asked.
	Missing []int32
	// Why says, per missing index, why.
	Why map[int32]string
}

// Gather reads the answers to req of workers, the attempt's pods (with their node agents'
// records). An index counts once, by its first live pod.
func Gather(req *v1alpha1.CheckpointStatus, workers []*corev1.Pod) Progress {
	p := Progress{Why: map[int32]string{}}
	seen := map[int32]bool{}
	for _, w := range workers {
		i, ok := attempt.Index(w)
		if !ok || seen[int32(i)] || w.DeletionTimestamp != nil {
			continue
		}
		idx := int32(i)
		seen[idx] = true
		// Its answer first: a worker that saved and then ended (a node's shutdown stops it
		// after its save) has answered.
		if a := AnswerOf(req, w); a != nil {
			if a.Saved {
				ack := v1alpha1.CheckpointAck{Index: idx, Pod: w.Name, Step: a.Step, ExitCode: a.ExitCode}
				if at, err := time.Parse(time.RFC3339Nano, a.At); err == nil {
					ack.At = metav1.NewMicroTime(at)
				}
				p.Acks = append(p.Acks, ack)
			} else {
				p.Missing = append(p.Missing, idx)
				p.Why[idx] = a.Reason
			}
			continue
		}
		b := attempt.BarrierOf(w)
		switch {
		case b.Place != attempt.BarrierInWorker:
			p.Missing = append(p.Missing, idx)
			p.Why[idx] = "its barrier does not supervise it (an init container's), so nothing can ask it"
			continue
		case !b.OpenedFor(req.Attempt) && !b.RecordedRunning(req.Attempt):
			p.Missing = append(p.Missing, idx)
			p.Why[idx] = fmt.Sprintf("it does not run attempt %d (it waits at its barrier, or ended): it has nothing to save", req.Attempt)
			continue
		}
		p.Waiting = append(p.Waiting, idx)
	}
	slices.SortFunc(p.Acks, func(a, b v1alpha1.CheckpointAck) int { return int(a.Index - b.Index) })
	slices.Sort(p.Waiting)
	slices.Sort(p.Missing)
	return p
}

// Done reports whether the move req holds may go on at now: no worker is left to answer, or
// the deadline passed.
func (p Progress) Done(req *v1alpha1.CheckpointStatus, now time.Time) bool {
	return len(p.Waiting) == 0 || !now.Before(req.Deadline.Time)
}

// Update writes p into req: the answers so far; reports whether req changed.
func (p Progress) Update(req *v1alpha1.CheckpointStatus) bool {
	if slices.EqualFunc(req.Acks, p.Acks, func(a, b v1alpha1.CheckpointAck) bool { return a.Index == b.Index && a.At.Equal(&b.At) }) {
		return false
	}
	req.Acks = p.Acks
	return true
}

// End closes req at now, as the move goes on: the answers so far, and as missing every
// index that did not say it saved.
func (p Progress) End(req *v1alpha1.CheckpointStatus, now time.Time) {
	p.Update(req)
	missing := slices.Concat(p.Missing, p.Waiting)
	slices.Sort(missing)
	req.Missing = missing
	at := metav1.NewMicroTime(now)
	req.EndedAt = &at
}

// Summary says where req stands, for events and describe.
func Summary(req *v1alpha1.CheckpointStatus, workers int32) string {
	s := fmt.Sprintf("%d of %d workers saved", len(req.Acks), workers)
	if step, ok := LowestStep(req); ok {
		s += fmt.Sprintf(" (step %d at least)", step)
	}
	if req.EndedAt != nil && len(req.Missing) > 0 {
		s += fmt.Sprintf("; not indexes %v", req.Missing)
	}
	return s
}

// LowestStep is the lowest step the workers said they saved: the step the gang can resume
// from; ok is false when none said a step.
func LowestStep(req *v1alpha1.CheckpointStatus) (int64, bool) {
	var low int64
	ok := false
	for _, a := range req.Acks {
		if a.Step != nil && (!ok || *a.Step < low) {
			low, ok = *a.Step, true
		}
	}
	return low, ok
}

// Resume is the gang's last save as the barriers of its workers stopped for attempt n heard
// it (BarrierRecord.LastSave): the oldest of their last saves, the one every worker that
// said one has, which attempt n resumes from. A worker that said none is not counted: its
// barrier may be younger than the run's checkpoints (a pod that moved). False when no
// stopped worker said a save.
func Resume(pods []*corev1.Pod, n int32) (*v1alpha1.SavedStatus, bool) {
	var out *v1alpha1.SavedStatus
	workers := int32(0)
	for _, p := range pods {
		rec := attempt.BarrierRecord(p)
		if rec == nil || rec.StoppedFor != n || rec.LastSave == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, rec.LastSave.At)
		if err != nil {
			continue
		}
		workers++
		if out == nil || at.Before(out.At.Time) {
			// To the microsecond, as the status keeps it: what is computed from it now is
			// what a reader of the status computes.
			out = &v1alpha1.SavedStatus{Step: rec.LastSave.Step, At: metav1.NewMicroTime(at.Truncate(time.Microsecond))}
		}
	}
	if out == nil {
		return nil, false
	}
	out.Workers = workers
	return out, true
}

// Budget is the PodDisruptionBudget of a run with spec.checkpoint: named as the run, over
// its pods (by the run's UID), allowing no eviction of a ready worker: minAvailable is every
// worker (maxUnavailable would need the scale of the pods' controller, which a Job does not
// have: the disruption controller fails to sync it, and evictions go through). A drain's
// evictions are then refused while the run lives, and faultline moves the workers of the
// drained node itself, after they saved (the drain's cordon is the notice; kubectl drain
// retries its evictions until the pods are gone). A worker not Ready yet is not evicted
// either (the default IfHealthyBudget: the budget is never met while it is not): the status
// of a worker that has just started lags what its node agent recorded, and its eviction would
// end the gang's attempt as a failure.
func Budget(run *v1alpha1.TrainingRun) *policyv1.PodDisruptionBudget {
	all := intstr.FromInt32(run.Spec.Workers)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace,
			Labels: map[string]string{v1alpha1.LabelRun: run.Name, v1alpha1.LabelRunUID: string(run.UID)}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &all,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.LabelRunUID: string(run.UID)}},
		},
	}
}
