package inplace

import (
	"context"
	"fmt"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// RunDecision reads the controller's decision for pod out of its TrainingRun's status (the
// agent's Decisions, once it watches the runs): the attempt the gang is to run, and whether
// the gang's barrier is open for it. Pure.
//
//   - The attempt is status.attempt. A run that ended, or has not started, decides nothing.
//   - The barrier is open unless the attempt restarts in place and the controller has not
//     written barrierOpenedAt yet: a first attempt's pods, and a recreated attempt's, are all
//     new, with no old worker anywhere to wait for.
//   - Only pods of the attempt's Job are the agent's to act on: those made for the Job's
//     attempt (status.attempts[].jobAttempt, else the attempt itself) or later. A pod of an
//     older Job is on its way out (a recreate deletes it); stopping its worker would restart
//     it in place and, the barrier being open, run it beside its index's new pod.
func RunDecision(run *v1alpha1.TrainingRun, pod *corev1.Pod) (attemptNumber int, barrierOpen, ok bool) {
	if run == nil || pod.Labels[v1alpha1.LabelRun] != run.Name || pod.Namespace != run.Namespace {
		return 0, false, false
	}
	if uid, set := pod.Labels[v1alpha1.LabelRunUID]; set && uid != string(run.UID) {
		return 0, false, false // a pod of an earlier run of the same name
	}
	st := run.Status
	switch st.Phase {
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseSuspended:
		return 0, false, false
	}
	n := st.Attempt
	if n < 1 {
		return 0, false, false
	}
	rec := attempt.Record(run)
	if k, labelled := attempt.Number(pod); !labelled || k < attempt.JobAttempt(run) {
		return 0, false, false
	}
	open := rec == nil || rec.RestartMode != v1alpha1.RestartModeInPlace || rec.BarrierOpenedAt != nil
	return int(n), open, true
}

// StoreDecisions is the agent's Decisions over a store of TrainingRuns keyed namespace/name,
// as cache.MetaNamespaceKeyFunc keys them: an informer's store, or the agent's watches of
// its node's runs (runwatch.Set).
type StoreDecisions struct {
	Runs interface {
		GetByKey(key string) (item any, exists bool, err error)
	}
}

var _ Decisions = StoreDecisions{}

// For reads pod's run from the store and its decision (RunDecision).
func (d StoreDecisions) For(pod *corev1.Pod) (int, bool, bool) {
	name := pod.Labels[v1alpha1.LabelRun]
	if name == "" {
		return 0, false, false
	}
	obj, exists, err := d.Runs.GetByKey(pod.Namespace + "/" + name)
	if err != nil || !exists {
		return 0, false, false
	}
	run, _ := obj.(*v1alpha1.TrainingRun)
	return RunDecision(run, pod)
}

// GetRun reads one TrainingRun from the API server itself (coreclient.Client.GetTrainingRun).
type GetRun func(ctx context.Context, namespace, name string) (*v1alpha1.TrainingRun, error)

// ConfirmWith is a Confirm that reads the pod's run with get (RunDecision on it). The
// barriers of one run's pods on a node open together: those asked while a read of the run is
// in flight share it, so a gang costs the API server about one read per node, not one per
// pod.
func ConfirmWith(get GetRun) Confirm {
	var reads singleflight.Group
	return confirmBy(get, func(key string, read func() (any, error)) (any, error) {
		v, err, _ := reads.Do(key, read)
		return v, err
	})
}

// ConfirmEach is a Confirm whose every call reads the pod's run with get, sharing no read:
// what it says is as of after the call began. A read in flight, begun before the caller's
// last write, may not say what the run had become by then: the agent asks this once it has
// recorded an open, before the open (Restarter.Confirm).
func ConfirmEach(get GetRun) Confirm {
	return confirmBy(get, func(_ string, read func() (any, error)) (any, error) { return read() })
}

// confirmBy is a Confirm that reads the pod's run with get, through do (the run's
// namespace/name as its key).
func confirmBy(get GetRun, do func(key string, read func() (any, error)) (any, error)) Confirm {
	return func(ctx context.Context, pod *corev1.Pod) (int, bool, bool, error) {
		name := pod.Labels[v1alpha1.LabelRun]
		if name == "" {
			return 0, false, false, nil
		}
		v, err := do(pod.Namespace+"/"+name, func() (any, error) { return get(ctx, pod.Namespace, name) })
		if apierrors.IsNotFound(err) {
			return 0, false, false, nil
		}
		if err != nil {
			return 0, false, false, fmt.Errorf("read run %s/%s: %w", pod.Namespace, name, err)
		}
		n, open, ok := RunDecision(v.(*v1alpha1.TrainingRun), pod)
		return n, open, ok, nil
	}
}
