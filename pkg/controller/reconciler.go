package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/controller/admission"
	"github.com/faultline-dev/faultline/pkg/controller/creations"
	"github.com/faultline-dev/faultline/pkg/controller/episode"
	"github.com/faultline-dev/faultline/pkg/controller/inplace"
	"github.com/faultline-dev/faultline/pkg/controller/plannedmove"
	"github.com/faultline-dev/faultline/pkg/controller/savegate"
	"github.com/faultline-dev/faultline/pkg/controller/spares"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/goodput"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/nodemaintenance"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// Frameworks gives the framework-specific parts of a run: what its pods need for the
// framework's rendezvous (environment, ports) and its failure hints. An error means the
// framework's plugin is not usable right now. framework.Host is the implementation.
type Frameworks interface {
	Resolve(ctx context.Context, run *v1alpha1.TrainingRun) (framework.Resolved, error)
	Hints(ctx context.Context, run *v1alpha1.TrainingRun) ([]exitclass.Hint, error)
}

// Reconciler reconciles TrainingRuns.
type Reconciler struct {
	// Client reads Jobs, pods and nodes from the manager's cache and writes to the API server.
	client.Client
	// APIReader reads from the API server: a run whose cached copy may be older than the
	// controller's last write of it (see knownVersions), and the last check for leftovers.
	APIReader  client.Reader
	Recorder   events.EventRecorder
	Clock      clock.PassiveClock
	Frameworks Frameworks
	// Episodes records the fault episodes' traces (nil: none).
	Episodes *episode.Recorder
	// Crash is called at the named crash points; tests make it kill the process.
	Crash func(point string)
	// Maintenance says which platform signals of a planned maintenance the runs act on.
	Maintenance maintenance.Config
	// BarrierImage is faultline-barrier's image, the init container of the pods that
	// restart in place; "" restarts none in place (every restart recreates).
	BarrierImage string
	// BarrierInWorker makes the barrier the worker container's entrypoint where the
	// template and the nodes allow it (attempt.Options.BarrierInWorker, barrier), where it
	// stays with the worker as its child: a restart in place restarts no container.
	BarrierInWorker bool
	// NodeConditions are the node conditions of the cluster's own health checkers that are
	// infrastructure evidence for the workers of their node (exitclass rule 7b).
	NodeConditions []exitclass.NodeConditionRule
	// Admission admits runs that name a Kueue queue (nil: as without the Kueue integration).
	Admission admission.Gate
	// PodGroups puts each gang run's workers in a PodGroup of its own (package podgroup),
	// where the cluster serves them.
	PodGroups bool

	progress  progressWrites
	failures  failureClock
	versions  knownVersions
	removed   removals
	forced    removals // removed at once (forceRemovePods)
	deletions jobDeletions
	creations creations.Creations
	spares    spares.Keeper
}

// Reconcile moves one run one step (or several, when nothing needs to wait) further.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	run := &v1alpha1.TrainingRun{}
	if err := r.getRun(ctx, req.NamespacedName, run); err != nil {
		if errors.Is(err, errCacheBehindOwnWrite) {
			return ctrl.Result{}, nil // the write's watch event brings the run back
		}
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, r.retireGone(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if run.DeletionTimestamp != nil {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, r.retireGone(ctx, req.NamespacedName)
	}
	ctx = withPersisted(ctx, run)
	if res, done, err := r.admit(ctx, run); done || err != nil {
		return res, err
	}
	if run.Status.Attempt == 0 {
		return ctrl.Result{}, r.start(ctx, run)
	}
	obs, err := r.observe(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	if run.Status.Phase != v1alpha1.PhaseSucceeded && run.Status.Phase != v1alpha1.PhaseFailed {
		// A finished run starts no attempt that a node kept off would matter to.
		if lifted, err := r.liftMaintenance(ctx, run); err != nil {
			return ctrl.Result{}, err
		} else if lifted {
			if err := r.writeStatus(ctx, run); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	live := func(p *corev1.Pod) bool { return !exitclass.Gone(p, obs.nodes) }
	switch {
	case run.Status.Phase == v1alpha1.PhaseSucceeded || run.Status.Phase == v1alpha1.PhaseFailed:
		return r.finished(ctx, run, obs)
	case ptr.Deref(run.Spec.Suspend, false):
		return r.suspend(ctx, run, obs)
	case run.Status.Phase == v1alpha1.PhaseSuspended:
		return ctrl.Result{}, r.resume(ctx, run)
	case obs.other != nil || slices.ContainsFunc(obs.leftovers, live):
		return r.clearLeftovers(ctx, run, obs)
	case slices.ContainsFunc(obs.older, live) || (obs.job != nil && (obs.jobAttempt() < attempt.JobAttempt(run) || obs.job.DeletionTimestamp != nil)):
		return r.teardown(ctx, run, obs)
	case obs.job == nil && len(obs.current) > 0:
		return r.jobLost(ctx, run, obs)
	case obs.job == nil:
		return r.createAttempt(ctx, run, obs)
	case inplace.Starting(run):
		return r.inPlace(ctx, run, obs)
	}
	return r.track(ctx, run, obs)
}

// retireGone retires the Job of a run that is gone or being deleted (see retire): the
// garbage collector deletes it, and it stays, held by FinalizerAttemptJob, until its pods
// are gone and the Job controller is done with it.
func (r *Reconciler) retireGone(ctx context.Context, key types.NamespacedName) error {
	job := &batchv1.Job{}
	if err := r.Get(ctx, key, job); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !faultlineJob(job) {
		return nil
	}
	pods, err := r.podsOf(ctx, key.Namespace, key.Name)
	if err != nil {
		return err
	}
	_, err = r.retire(ctx, job, pods, r.nodeFacts(ctx, pods))
	return err
}

// start gives a new run its first attempt.
func (r *Reconciler) start(ctx context.Context, run *v1alpha1.TrainingRun) error {
	now := r.now()
	run.Status.Attempt = 1
	run.Status.Phase = v1alpha1.PhasePending
	run.Status.StartTime = &now
	run.Status.Attempts = []v1alpha1.AttemptRecord{{Attempt: 1}}
	return r.writeStatus(ctx, run)
}

// track follows a running attempt: success, the first failure, readiness.
func (r *Reconciler) track(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	workers := obs.workers()
	if jobSucceeded(obs.job) || managedSucceeded(run, obs.job, workers) || leaderSucceeded(run, workers) {
		return ctrl.Result{}, r.succeed(ctx, run, obs)
	}
	if attempt.Managed(obs.job) && obs.job.DeletionTimestamp == nil {
		// Indexes without a pod: a creation a crash cut short, or a pod deleted before it
		// was ever scheduled, which its finalizer no longer holds: it never ran, so a new
		// one joins no gang behind its back. A pod that ran is held by its finalizer until
		// it is judged (attempt.Pod), and keeps its index.
		if err := r.releaseUnscheduled(ctx, workers); err != nil {
			return ctrl.Result{}, err
		}
		// The pods an in-place fallback retired after the barrier opened go (again, if a
		// crash came between the record and their deletion), and their indexes get new
		// pods once they are gone.
		if err := r.removePods(ctx, obs.supersededPods(), true); err != nil {
			return ctrl.Result{}, err
		}
		excluded := attempt.ExcludedNodes(run)
		if rec := attempt.Record(run); rec != nil && rec.RestartMode == v1alpha1.RestartModeInPlace {
			excluded = rec.ExcludedNodes
		}
		o := attempt.PodOptions{Attempt: run.Status.Attempt, ExcludedNodes: excluded}
		if err := r.handOver(ctx, run, obs, obs.holders(), o); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.createPods(ctx, run, obs.job, obs.holders(), o); err != nil && !errors.Is(err, errPodRefused) {
			return ctrl.Result{}, err
		}
		if err := r.keepSpares(ctx, run, obs, o); err != nil {
			return ctrl.Result{}, err
		}
	}
	// In Gang scope the first failure ends the attempt: a worker that ended, or one that runs
	// on fatal infrastructure evidence (it hangs on the fault); and so does a gang none of
	// whose workers has shown progress for the run's deadline. In Index scope the Job
	// controller replaces failed indexes itself; the run fails only when the Job gives up.
	now := r.now().Time
	judge := slices.ContainsFunc(workers, func(p *corev1.Pod) bool { return exitclass.Failed(p, obs.nodes, now) }) || exitclass.Stalled(workers)
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		judge = jobFailed(obs.job)
	}
	if judge {
		if st := savegate.Hold(run, obs.workers(), obs.nodes, now); st.Wait || len(st.Events) > 0 {
			if err := r.saveStep(ctx, run, st, false); st.Wait || err != nil {
				return ctrl.Result{RequeueAfter: st.After}, err
			}
		}
		return r.judge(ctx, run, obs)
	}
	res, err := r.trackRunning(ctx, run, obs)
	if at := exitclass.FailsAt(workers, obs.nodes, now); !at.IsZero() && err == nil {
		// A worker's node is unreachable within its bound, or announced a shutdown that has
		// not ended the worker yet: no object changes when the bound runs out, so look
		// again then.
		res.RequeueAfter = earliest(res.RequeueAfter, at.Sub(now))
	}
	return res, err
}

// earliest is the sooner of two requeues, zero meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// trackRunning follows an attempt none of whose workers has failed: a planned maintenance,
// readiness.
func (r *Reconciler) trackRunning(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	if res, acted, err := r.barrierUnpullable(ctx, run, obs); acted || err != nil {
		return res, err
	}
	f, opening := r.coordinator().Opening(ctx, run, obs.workers())
	if f != nil {
		return r.fallback(ctx, run, f)
	}
	res, err := r.trackPlanned(ctx, run, obs)
	res.RequeueAfter = earliest(res.RequeueAfter, opening)
	return res, err
}

// trackPlanned follows an attempt whose workers run or start: a planned maintenance,
// readiness.
func (r *Reconciler) trackPlanned(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	if run.Spec.RestartScope != v1alpha1.RestartScopeIndex {
		res, done, err := r.plan(ctx, run, obs)
		if done || err != nil {
			return res, err
		}
		if res.RequeueAfter > 0 {
			// A scheduled maintenance becomes due then; the progress's own requeue may be sooner.
			got, err := r.updateProgress(ctx, run, obs)
			got.RequeueAfter = earliest(got.RequeueAfter, res.RequeueAfter)
			return got, err
		}
	}
	return r.updateProgress(ctx, run, obs)
}

// planner reads the planned maintenances of the runs' nodes from the cache.
func (r *Reconciler) planner() *plannedmove.Planner {
	return &plannedmove.Planner{Client: r.Client, Maintenance: r.Maintenance, Clock: r.Clock}
}

// plan acts on a planned maintenance of a running attempt's nodes: a restart, a word that
// the run cannot move, or nothing yet. done is false when tracking goes on as usual.
func (r *Reconciler) plan(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (res ctrl.Result, done bool, err error) {
	mv, err := r.planner().Plan(ctx, run, obs.workers())
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if !mv.Next.IsZero() {
		res.RequeueAfter = mv.Next.Sub(r.Clock.Now())
	}
	blocked := mv.Blocked != "" && len(mv.Nodes) == 0
	if changed := plannedmove.SetBlocked(run, blocked, mv.Blocked); changed {
		if blocked {
			r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonMaintenanceBlocked, v1alpha1.ActionWait, "%s", mv.Blocked)
		}
		return res, true, r.writeStatus(ctx, run)
	}
	if len(mv.Nodes) == 0 {
		if st := savegate.OnShutdown(run, obs.workers(), obs.nodes, r.Clock.Now()); st.Changed {
			return res, true, r.saveStep(ctx, run, st, true)
		}
		return res, false, nil
	}
	st := savegate.Ask(run, obs.workers(), "planned maintenance of "+strings.Join(mv.Nodes, ", ")+" ("+mv.Why()+")", mv.Nodes, r.Clock.Now())
	if err := r.saveStep(ctx, run, st, false); st.Wait || err != nil {
		res.RequeueAfter = earliest(res.RequeueAfter, st.After)
		return res, true, err
	}
	res, err = r.plannedRestart(ctx, run, obs, mv)
	return res, true, err
}

// plannedRestart decides on a planned move through the failure policy (a rule that names
// PlannedMaintenance may spend budget or fail the run), and acts on it as on a failure's;
// the move's nodes are kept off until their maintenance is over.
func (r *Reconciler) plannedRestart(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, mv plannedmove.Move) (ctrl.Result, error) {
	now := r.now()
	d := policy.Decide(policy.Input{
		Policy:   run.Spec.FailurePolicy,
		Restarts: run.Status.Restarts,
		History:  run.Status.Attempts,
		Failure:  mv.Failure(),
		FailedAt: now.Time,
	})
	apply, ok := actions[d.Action]
	if !ok {
		return ctrl.Result{}, fmt.Errorf("run %s/%s: rule %s has unknown action %q", run.Namespace, run.Name, d.Rule, d.Action)
	}
	if d.Action != v1alpha1.ActionFailRun {
		for _, n := range mv.Nodes {
			if !slices.Contains(run.Status.MaintenanceExcludedNodes, n) && len(run.Status.MaintenanceExcludedNodes) < v1alpha1.MaxExcludedNodes {
				run.Status.MaintenanceExcludedNodes = append(run.Status.MaintenanceExcludedNodes, n)
			}
		}
	}
	plannedmove.SetBlocked(run, false, "")
	return apply(r, ctx, run, obs, mv.Verdict(run, d, now), d, nil)
}

// liftMaintenance drops the maintenance exclusions of nodes whose maintenance is over, and
// says so in an event. It reports whether the status changed (the caller writes it).
func (r *Reconciler) liftMaintenance(ctx context.Context, run *v1alpha1.TrainingRun) (bool, error) {
	kept, lifted, err := r.planner().Lift(ctx, run)
	if err != nil || len(lifted) == 0 {
		return false, err
	}
	run.Status.MaintenanceExcludedNodes = kept
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonMaintenanceOver, v1alpha1.ActionLiftExclusion, "maintenance of %s is over (uncordoned, or its signal gone): later attempts may use %s again",
		strings.Join(lifted, ", "), plural(len(lifted), "it", "them"))
	return true, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// runsOnNodes are the runs with a worker on one of nodes, or that keep one of them off for a
// maintenance.
func (r *Reconciler) runsOnNodes(ctx context.Context, nodes []string) []reconcile.Request {
	seen := map[client.ObjectKey]bool{}
	var reqs []reconcile.Request
	addKey := func(k client.ObjectKey) {
		if k.Name != "" && !seen[k] {
			seen[k] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: k})
		}
	}
	for _, n := range nodes {
		pods := &corev1.PodList{}
		if err := r.List(ctx, pods, client.MatchingFields{nodemaintenance.PodsByNode: n}); err == nil {
			for i := range pods.Items {
				addKey(client.ObjectKey{Namespace: pods.Items[i].Namespace, Name: pods.Items[i].Labels[v1alpha1.LabelRun]})
			}
		}
		runs := &v1alpha1.TrainingRunList{}
		if err := r.List(ctx, runs, client.MatchingFields{plannedmove.RunsByExclusion: n}); err == nil {
			for i := range runs.Items {
				addKey(client.ObjectKeyFromObject(&runs.Items[i]))
			}
		}
	}
	return reqs
}

// leaderSucceeded: under successPolicy Leader, index 0 has exited 0, which ends the run
// whatever its peers do after (they lose their leader, and many exit non-zero before the
// Job's SuccessCriteriaMet reaches the cache): a success is never judged as a failure.
func leaderSucceeded(run *v1alpha1.TrainingRun, workers []*corev1.Pod) bool {
	if run.Spec.SuccessPolicy != v1alpha1.SuccessPolicyLeader {
		return false
	}
	return slices.ContainsFunc(workers, func(p *corev1.Pod) bool {
		i, ok := attempt.Index(p)
		return ok && i == 0 && p.Status.Phase == corev1.PodSucceeded
	})
}

// progressInterval is how often at most a run's status records a change in the count of its
// ready workers alone. A gang of 256 becomes ready one worker after another over 12 s at the
// controller-manager's default rate limit: a write each cost the API server 240 writes of a
// restart's 2,400 (2026-11-23-s10-256-writes.md), beside the pod writes that the restart
// waits for. Every other change (the phase, the attempt's start or running time, the trace)
// is written at once, and so is the count with it.
const progressInterval = time.Second

// progressWrites remember when updateProgress last wrote each run's current attempt.
type progressWrites struct{ runs sync.Map } // types.NamespacedName → progressWrite

type progressWrite struct {
	uid     types.UID
	attempt int32
	at      time.Time
}

// last is when updateProgress last wrote run's current attempt (zero: never, as far as this
// process knows).
func (w *progressWrites) last(run *v1alpha1.TrainingRun) time.Time {
	if v, ok := w.runs.Load(runKey(run)); ok {
		if pw := v.(progressWrite); pw.uid == run.UID && pw.attempt == run.Status.Attempt {
			return pw.at
		}
	}
	return time.Time{}
}

func (w *progressWrites) wrote(run *v1alpha1.TrainingRun, at time.Time) {
	w.runs.Store(runKey(run), progressWrite{uid: run.UID, attempt: run.Status.Attempt, at: at})
}

func (w *progressWrites) forget(key types.NamespacedName) { w.runs.Delete(key) }

// updateProgress records readiness and the attempt's start; it writes only on change, and a
// change in the count of ready workers alone at most once per progressInterval.
func (r *Reconciler) updateProgress(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	before := run.Status.DeepCopy()
	now := r.now()
	st := &run.Status
	ready, bound := int32(0), int32(0)
	workers := obs.workers()
	for _, p := range workers {
		if podReady(p) && workerRuns(p, st.Attempt) || recordedReady(p, st.Attempt) {
			ready++
		}
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	st.ReadyWorkers = ready
	if obs.job != nil && attempt.JobAttempt(run) == run.Status.Attempt {
		attemptCreated(run, obs.job) // an attempt restarted in place started when its barrier opened
	}
	rec := currentRecord(run)
	if bound >= run.Spec.Workers || ready == run.Spec.Workers {
		r.Episodes.SawScheduled(run, now.Time)
	}
	if ready == run.Spec.Workers {
		if rec.RunningTime == nil {
			rec.RunningTime = &now
		}
		goodput.NoteFirstProgress(run, rec, workers, obs.nodes)
		st.Phase = v1alpha1.PhaseRunning
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllWorkersRunning, Message: fmt.Sprintf("%d/%d workers Running", ready, run.Spec.Workers)})
		if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionInPlaceWaiting) {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionInPlaceWaiting, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonBarrierOpen,
				Message: fmt.Sprintf("attempt %d: every worker runs it", st.Attempt)})
		}
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWaitingForWorkers, Message: fmt.Sprintf("%d/%d workers Running", ready, run.Spec.Workers)})
	}
	r.gpuMonitoring(run, workers, obs.nodes)
	again, err := r.creationStall(ctx, run, obs.job, workers)
	if err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(before, st) {
		// Not worth a write of its own, which would hold back the next step: the next
		// write records it, with the time it was first seen.
		return ctrl.Result{RequeueAfter: again}, nil
	}
	if onlyReadyCount(before, st) {
		if wait := r.progress.last(run).Add(progressInterval).Sub(now.Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.progress.wrote(run, now.Time)
	return ctrl.Result{RequeueAfter: again}, nil
}

// gpuMonitoring sets the GPUMonitoring condition (the caller writes it): False, with an
// event, while workers that ask for GPUs sit on nodes whose agent does not watch them; True
// again once none does.
func (r *Reconciler) gpuMonitoring(run *v1alpha1.TrainingRun, workers []*corev1.Pod, nodes map[string]exitclass.NodeFacts) {
	st := &run.Status
	if blind := exitclass.Unmonitored(workers, nodes); len(blind) > 0 {
		msg := "workers run on nodes whose GPUs no node agent watches, where a GPU fault is no evidence and a failure is judged from the workers' exits alone: " + exitclass.Named(blind)
		if meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionGPUMonitoring, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNodesNotMonitored, Message: msg}) {
			r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonNodesNotMonitored, v1alpha1.ActionWait, "%s", msg)
		}
		return
	}
	if meta.IsStatusConditionFalse(st.Conditions, v1alpha1.ConditionGPUMonitoring) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionGPUMonitoring, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllNodesMonitored, Message: "every worker's node has its GPUs watched"})
	}
}

// creationStall sets or clears Stalled for a Job that creates too few pods (see
// podsNotCreated), in the run's status (the caller writes it). It returns when to look
// again while the Job has fewer pods than workers: nothing else may wake the run.
func (r *Reconciler) creationStall(ctx context.Context, run *v1alpha1.TrainingRun, job *batchv1.Job, workers []*corev1.Pod) (time.Duration, error) {
	if job == nil || int32(len(workers)) >= run.Spec.Workers {
		if c := meta.FindStatusCondition(run.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Reason == v1alpha1.ReasonPodsNotCreated {
			unstall(run)
		}
		return 0, nil
	}
	now := r.now().Time
	if podsNotCreated(job, workers, run.Spec.Workers, "", now) == "" {
		return stuckAfter, nil
	}
	why, err := r.lastFailedCreate(ctx, job)
	if err != nil {
		return 0, err
	}
	if meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonPodsNotCreated, Message: podsNotCreated(job, workers, run.Spec.Workers, why, now)}) {
		r.event(run, corev1.EventTypeWarning, v1alpha1.ReasonPodsNotCreated, v1alpha1.ActionWait, "%s", podsNotCreated(job, workers, run.Spec.Workers, why, now))
	}
	return stalledRecheck, nil
}

// lastFailedCreate is the message of the Job controller's latest FailedCreate event on job
// (the API server's refusal of a pod), or "". Read only when the Job is stuck: it is a List.
func (r *Reconciler) lastFailedCreate(ctx context.Context, job *batchv1.Job) (string, error) {
	events := &corev1.EventList{}
	sel := fields.SelectorFromSet(fields.Set{"involvedObject.uid": string(job.UID), "reason": reasonFailedCreate})
	if err := r.APIReader.List(ctx, events, client.InNamespace(job.Namespace), client.MatchingFieldsSelector{Selector: sel}); err != nil {
		return "", fmt.Errorf("list events of job %s: %w", job.Name, err)
	}
	var last *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	if last == nil {
		return "", nil
	}
	return last.Message, nil
}

// reasonFailedCreate is the Job controller's event reason for a pod it could not create
// (k8s.io/kubernetes pkg/controller FailedCreatePodReason).
const reasonFailedCreate = "FailedCreate"

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.FirstTimestamp.Time
}

// onlyReadyCount reports whether after differs from before in the count of ready workers
// alone: ReadyWorkers and the message of the Ready condition that states it.
func onlyReadyCount(before, after *v1alpha1.TrainingRunStatus) bool {
	a := after.DeepCopy() // after, with before's count
	a.ReadyWorkers = before.ReadyWorkers
	if c, was := meta.FindStatusCondition(a.Conditions, v1alpha1.ConditionReady), meta.FindStatusCondition(before.Conditions, v1alpha1.ConditionReady); c != nil && was != nil {
		c.Message = was.Message
	}
	return equality.Semantic.DeepEqual(before, a)
}

// attemptCreated records that the current attempt's Job exists: its start, and the end of a
// restart. createAttempt calls it with the Job it created; updateProgress again, for a
// controller that created the Job and could not write this down.
func attemptCreated(run *v1alpha1.TrainingRun, job *batchv1.Job) {
	st := &run.Status
	rec := currentRecord(run)
	if rec.StartTime == nil {
		rec.StartTime = ptr.To(job.CreationTimestamp)
	}
	if st.Phase == v1alpha1.PhaseRestarting {
		st.Phase = v1alpha1.PhasePending
		st.NextAttemptAt = nil
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAttemptCreated, Message: fmt.Sprintf("attempt %d created", st.Attempt)})
	}
}

// judge classifies the failed attempt and, once the verdict is final, acts on the decision.
func (r *Reconciler) judge(ctx context.Context, run *v1alpha1.TrainingRun, obs *observed) (ctrl.Result, error) {
	judgedAt := r.now().Time // the trace's classify phase includes the plugin's hints
	failureSeen, ok := r.failures.firstSeen(run)
	if !ok {
		// A failure the informer's check did not see as one: the settle window counts from
		// this first judgement, not from each (it would never end).
		failureSeen = judgedAt
		r.failures.note(runKey(run), run.Status.Attempt, judgedAt)
	}
	// The plugin's calls belong to the failure's episode.
	hints, err := r.Frameworks.Hints(r.Episodes.HintsContext(ctx, run, obs.workers()), run)
	if err != nil {
		hints = nil // a broken plugin costs its hints, never the decision
	}
	now := r.now().Time
	v := exitclass.Classify(exitclass.Observation{
		Pods:  obs.workers(),
		Nodes: obs.nodes,
		Hints: hints,
		Now:   now,
		// The settle window is applied below, from the root's failure time.
		SettleDeadline: now.Add(time.Hour),
	})
	if v.RootPod == "" {
		return r.updateProgress(ctx, run, obs)
	}
	if (!v.Conclusive || v.StillRunning) && run.Spec.RestartScope != v1alpha1.RestartScopeIndex {
		// Evidence that may still come; or, for a worker that runs on fatal evidence, its
		// own end, which tells more than its hang (a CUDA call that fails ends most
		// programs within the window): the hung worker is stopped only after it.
		settle := time.Duration(ptr.Deref(run.Spec.FailurePolicy.SettleSeconds, policy.DefaultSettleSeconds)) * time.Second
		if deadline := policy.SettleDeadline(v.FailedAt, failureSeen, settle); now.Before(deadline) {
			return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
		}
	}
	if v.AwaitsNamed {
		// The survivors name a worker whose own exit has not reached the API yet: judging
		// without it would make a survivor the root. Wait for it, a little.
		if deadline := failureSeen.Add(namedWait); now.Before(deadline) {
			return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
		}
	}
	v.Final = true
	d := policy.Decide(policy.Input{
		Policy:   run.Spec.FailurePolicy,
		Restarts: run.Status.Restarts,
		History:  run.Status.Attempts,
		Failure:  policy.Failure{Class: v.Class, Cause: v.Cause, Node: v.Node},
		FailedAt: v.FailedAt,
	})
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		// The Job controller already spent the per-index retries; nothing to restart.
		d = policy.Decision{Action: v1alpha1.ActionFailRun, Rule: "index-scope", Reason: "the Job failed: an index ran out of retries or too many indexes failed"}
	}
	apply, ok := actions[d.Action]
	if !ok {
		return ctrl.Result{}, fmt.Errorf("run %s/%s: rule %s has unknown action %q", run.Namespace, run.Name, d.Rule, d.Action)
	}
	vs := v.Status(d.Rule, d.Action, r.now())
	return apply(r, ctx, run, obs, vs, d, r.Episodes.Decided(run, obs.workers(), v.RootPod, v.Cause, failureSeen, judgedAt, vs.DecidedAt.Time))
}

// namedWait is how long after a gang's first failure the judgement waits for the exit of the
// worker its survivors name as the one that failed (exitclass.Verdict.AwaitsNamed). They saw
// it end already, so its kubelet reports it within seconds; a worker named by mistake costs
// its gang this much.
const namedWait = 10 * time.Second

// applier acts on a decision. Every applier persists the decision first, with tr, the
// decided episode's status.trace (nil without tracing).
type applier func(r *Reconciler, ctx context.Context, run *v1alpha1.TrainingRun, obs *observed, v *v1alpha1.FailureVerdict, d policy.Decision, tr *v1alpha1.TraceStatus) (ctrl.Result, error)

var actions = map[v1alpha1.Action]applier{
	v1alpha1.ActionRestartRun:             (*Reconciler).restart,
	v1alpha1.ActionRestartRunIgnoreBudget: (*Reconciler).restart,
	v1alpha1.ActionFailRun:                (*Reconciler).fail,
}

// writeStatus writes the run's status, then tells the world what the write changed
// (transitioned: spans, metrics, events).
func (r *Reconciler) writeStatus(ctx context.Context, run *v1alpha1.TrainingRun) error {
	run.Status.ObservedGeneration = run.Generation
	p, _ := ctx.Value(persistedKey{}).(*persisted)
	if p != nil {
		// Reconcile's writes know the status they replace: the episode's phases and the
		// goodput ledger advance from it.
		now := r.Clock.Now()
		r.Episodes.Stamp(p.status, run, now)
		run.Status.Goodput = goodput.Advance(p.status.Goodput, run.CreationTimestamp.Time, attempt.ProgressWatched(run), p.status, &run.Status, now)
	}
	from := run.ResourceVersion
	written := run.Status.DeepCopy()
	if err := r.Status().Update(ctx, run); err != nil {
		return fmt.Errorf("update status of %s/%s: %w", run.Namespace, run.Name, err)
	}
	r.versions.wrote(run, from)
	if p != nil {
		after := answered(run, written)
		r.transitioned(ctx, run, p.status, after)
		p.status = after
	}
	return nil
}

// forget drops what the reconciler remembers of a deleted run.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.Episodes.Forget(key)
	r.progress.forget(key)
	r.failures.forget(key)
	r.versions.forget(key)
}

func (r *Reconciler) now() metav1.Time { return metav1.NewTime(r.Clock.Now()) }

func (r *Reconciler) crash(point string) {
	if r.Crash != nil {
		r.Crash(point)
	}
}

// maxEventNote is the API server's limit on an events.k8s.io note.
const maxEventNote = 1024

// event records an event on the run. Notes are cut to the API's limit: an explanation of a
// large gang can be longer, and an over-long event would be dropped whole.
func (r *Reconciler) event(run *v1alpha1.TrainingRun, eventtype, reason, action, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	if len(note) > maxEventNote {
		cut := maxEventNote - 3
		for cut > 0 && !utf8.RuneStart(note[cut]) {
			cut-- // never split a rune (explanations use "→")
		}
		note = note[:cut] + "..."
	}
	r.Recorder.Eventf(run, nil, eventtype, reason, action, "%s", note)
}

func runKey(run *v1alpha1.TrainingRun) types.NamespacedName {
	return types.NamespacedName{Namespace: run.Namespace, Name: run.Name}
}
