package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
)

// A gang restart in place (docs/in-place-restart.md): the attempt's Job and the pods of the
// healthy nodes stay; the node agents stop the old workers through the container runtime, and
// each pod's RestartAllContainers rule brings it back to its barrier; only the indexes whose
// pods cannot restart where they are (on a faulty node, ended, being deleted) get new pods.
// Once no old worker of the gang runs, the controller writes barrierOpenedAt, and the agents
// let every pod's workers start with the new attempt.

// inPlaceStarting reports whether the current attempt restarts in place and its barrier is
// not open yet.
func inPlaceStarting(run *v1alpha1.TrainingRun) bool {
	rec := attempt.Record(run)
	return rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace && rec.BarrierOpenedAt == nil
}

// inPlaceSupport says whether the nodes a run's gang may run on can restart its pods in
// place, and names those that cannot. Pure: nodes are the cluster's.
//
// The nodes considered are those the template's nodeSelector selects (its affinity and
// tolerations are the scheduler's business: a stricter placement only narrows this set). A
// node can when its kubelet declares RestartAllContainersOnContainerExits (without it the
// scheduler keeps a pod with the rule off the node) and its node agent reports
// InPlaceReady (it can stop the workers and open the barriers).
func inPlaceSupport(run *v1alpha1.TrainingRun, nodes []corev1.Node) (ok bool, unsupported []string) {
	// A role's pods go where its own nodeSelector (spec.roles) sends them; the template's
	// stays among those considered even when every role has its own: a node too many only
	// errs towards recreating.
	sels := []labels.Selector{labels.SelectorFromSet(run.Spec.Template.Spec.NodeSelector)}
	for _, role := range run.Spec.Roles {
		if len(role.NodeSelector) > 0 {
			set := maps.Clone(run.Spec.Template.Spec.NodeSelector)
			if set == nil {
				set = map[string]string{}
			}
			maps.Copy(set, role.NodeSelector)
			sels = append(sels, labels.SelectorFromSet(set))
		}
	}
	considered := 0
	for i := range nodes {
		n := &nodes[i]
		if n.Spec.Unschedulable || !slices.ContainsFunc(sels, func(sel labels.Selector) bool { return sel.Matches(labels.Set(n.Labels)) }) {
			continue
		}
		considered++
		if why := nodeCannotRestartInPlace(n); why != "" {
			unsupported = append(unsupported, n.Name+" ("+why+")")
		}
	}
	return considered > 0 && len(unsupported) == 0, unsupported
}

// nodeCannotRestartInPlace says why node cannot restart a pod in place, or "".
func nodeCannotRestartInPlace(n *corev1.Node) string {
	if !slices.Contains(n.Status.DeclaredFeatures, v1alpha1.FeatureRestartAllContainers) {
		return "its kubelet does not declare " + v1alpha1.FeatureRestartAllContainers
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1alpha1.NodeConditionInPlaceReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return "its node agent is not ready: " + c.Message
		}
	}
	return "its node agent does not report " + v1alpha1.NodeConditionInPlaceReady
}

// barrierImage is the barrier image the next Job's pods get, "" for pods that do not restart
// in place (restartMode Recreate, Index scope, or Auto on nodes that cannot). With restartMode
// InPlace on nodes that cannot, why says which.
func (r *Reconciler) barrierImage(ctx context.Context, run *v1alpha1.TrainingRun) (image, why string, err error) {
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex || run.Spec.FailurePolicy.RestartMode == v1alpha1.RestartModeRecreate || r.BarrierImage == "" {
		return "", "", nil
	}
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes); err != nil {
		return "", "", fmt.Errorf("list nodes: %w", err)
	}
	ok, unsupported := inPlaceSupport(run, nodes.Items)
	switch {
	case ok:
		return r.BarrierImage, "", nil
	case run.Spec.FailurePolicy.RestartMode != v1alpha1.RestartModeInPlace:
		return "", "", nil // Auto: recreate
	case len(unsupported) == 0:
		return "", "spec.failurePolicy.restartMode is InPlace and no schedulable node matches spec.template.spec.nodeSelector", nil
	}
	return "", fmt.Sprintf("spec.failurePolicy.restartMode is InPlace, and %s cannot restart a pod in place: "+
		"enable the kubelet's RestartAllContainersOnContainerExits feature and give the node agent its container runtime socket, or set restartMode Auto or Recreate", named(unsupported)), nil
}

// movedIndexes are the indexes of workers (the current Job's pods) that cannot restart in
// place at the next attempt, whose excluded nodes are excluded: their pod has ended, is being
// deleted, is on an excluded node, or on a node that cannot restart it in place; and the
// indexes without a pod. Pure.
func movedIndexes(workers []*corev1.Pod, n int32, excluded []string, nodes map[string]exitclass.NodeFacts, cannot func(node string) bool) []int32 {
	have := make([]bool, n)
	var moved []int32
	for _, p := range workers {
		i, ok := attempt.Index(p)
		if !ok || i >= int(n) {
			continue
		}
		have[i] = true
		node := p.Spec.NodeName
		if p.DeletionTimestamp != nil || podGone(p, nodes) || node != "" && (slices.Contains(excluded, node) || cannot(node)) {
			moved = append(moved, int32(i))
		}
	}
	for i, h := range have {
		if !h {
			moved = append(moved, int32(i))
		}
	}
	slices.Sort(moved)
	return slices.Compact(moved)
}

// stoppedForBarrier reports whether pod runs no worker of an attempt before n: made for n
// (its barrier has never opened for an older one), or held at its barrier (the kubelet
// removed every old container before it ran it again) with no worker running. Pure.
func stoppedForBarrier(p *corev1.Pod, n int32) bool {
	if k, ok := attempt.Number(p); ok && k >= n {
		return true
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name == v1alpha1.BarrierContainer && cs.State.Terminated != nil {
			return false // opened for an older attempt: its workers run, or are about to
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return false
		}
	}
	return true
}

// inPlace moves a restart in place on: the old pods of moved indexes are stopped, and each
// gets its new pod once the old one is gone; once no worker of an older attempt runs in the
// gang and the backoff is over, the barrier opens (one status write for the gang).
func (r *Reconciler) inPlace(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	n := run.Status.Attempt
	rec := attempt.Record(run)
	workers := obs.jobPods()
	excluded := rec.ExcludedNodes // the run's, and this restart's fault's node
	// The indexes the decision moved, and any whose pod cannot restart where it is since
	// (ended, deleted, its node excluded now).
	moved := movedIndexes(workers, run.Spec.Workers, excluded, obs.nodes, func(string) bool { return false })
	moved = append(moved, rec.MovedIndexes...)
	for _, p := range workers {
		if i, ok := attempt.Index(p); ok {
			if k, _ := attempt.Number(p); k == n && n > attempt.JobAttempt(run) {
				moved = append(moved, int32(i)) // a new pod made for this attempt
			}
		}
	}
	moved = slices.Compact(slices.Sorted(slices.Values(moved)))
	var old, present []*corev1.Pod
	for _, p := range workers {
		i, _ := attempt.Index(p)
		k, _ := attempt.Number(p)
		if k < n && slices.Contains(moved, int32(i)) {
			old = append(old, p)
			if !podGone(p, obs.nodes) {
				present = append(present, p)
			}
			continue
		}
		present = append(present, p)
	}
	if err := r.removePods(ctx, old, true); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.createPods(ctx, run, obs.job, present, attempt.PodOptions{Attempt: n, ExcludedNodes: excluded}); err != nil {
		return ctrl.Result{}, err
	}
	var waiting []*corev1.Pod
	for _, p := range present {
		if !stoppedForBarrier(p, n) {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) > 0 {
		// A node agent that does not stop its workers (it went, or lost its container
		// runtime, after the decision) would hold the gang forever: past inPlaceTimeout their
		// pods are deleted, and their indexes move.
		if decided, ok := restartDecidedAt(run); ok && !r.Clock.Now().Before(decided.Add(inPlaceTimeout)) {
			r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonInPlaceUnsupported, v1alpha1.ActionStopWorkers,
				"attempt %d: %d workers not stopped in place %s after the decision (their node agent did not act): moving their indexes", n, len(waiting), inPlaceTimeout)
			if err := r.removePods(ctx, waiting, true); err != nil {
				return ctrl.Result{}, err
			}
		}
		res, err := r.waitingFor(ctx, run, obs)
		if err == nil && (res.RequeueAfter == 0 || res.RequeueAfter > inPlaceTimeout) {
			res.RequeueAfter = inPlaceTimeout
		}
		return res, err
	}
	now := r.now()
	if next := run.Status.NextAttemptAt; next != nil && now.Before(next) {
		return ctrl.Result{RequeueAfter: next.Sub(now.Time)}, nil
	}
	rec.BarrierOpenedAt = &now
	rec.StartTime = &now
	rec.MovedIndexes = moved
	st := &run.Status
	st.Phase = v1alpha1.PhasePending
	st.NextAttemptAt = nil
	if tr := st.Trace; tr != nil && tr.Traceparent != "" {
		if tr.TornDownAt == nil {
			tr.TornDownAt = micro(now.Time)
		}
		if tr.CreatingAt == nil {
			tr.CreatingAt = micro(now.Time)
		}
		tr.CreatedAt = micro(now.Time)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAttemptCreated,
		Message: fmt.Sprintf("attempt %d restarted in place", n)})
	unstall(run)
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonAttemptCreated, v1alpha1.ActionCreateAttempt, "attempt %d: every old worker stopped, barrier open; %d workers restarted in place, %s",
		n, int(run.Spec.Workers)-len(moved), movedText(moved))
	return ctrl.Result{}, nil
}

func movedText(moved []int32) string {
	if len(moved) == 0 {
		return "no index moved"
	}
	s := make([]string, len(moved))
	for i, m := range moved {
		s[i] = fmt.Sprint(m)
	}
	return "indexes " + strings.Join(s, ",") + " on new pods"
}

// inPlaceTimeout is how long the node agents have to stop the old workers of a gang that
// restarts in place (they take about a second on a real node, docs/in-place-restart.md).
const inPlaceTimeout = time.Minute

// restartDecidedAt is when the restart into the current attempt was decided: the end of the
// attempt before.
func restartDecidedAt(run *v1alpha1.TrainingRun) (time.Time, bool) {
	h := run.Status.Attempts
	if len(h) < 2 || h[len(h)-2].EndTime == nil {
		return time.Time{}, false
	}
	return h[len(h)-2].EndTime.Time, true
}

// canRestartInPlace reports whether the run's current attempt can end in a restart in place:
// its Job is faultline's, made in the shape of pods that restart in place, and stays.
func canRestartInPlace(run *v1alpha1.TrainingRun, obs *observed) bool {
	return run.Spec.FailurePolicy.RestartMode != v1alpha1.RestartModeRecreate && obs.job != nil && obs.job.DeletionTimestamp == nil &&
		attempt.Managed(obs.job) && attempt.InPlaceShape(obs.job)
}

// cannotRestartInPlace says of a node (from the cache) whether it cannot restart a pod in
// place now: its node agent went, or lost its container runtime. A node the cache does not
// show cannot either.
func (r *Reconciler) cannotRestartInPlace(ctx context.Context) func(node string) bool {
	return func(name string) bool {
		n := &corev1.Node{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return true
		}
		return nodeCannotRestartInPlace(n) != ""
	}
}
