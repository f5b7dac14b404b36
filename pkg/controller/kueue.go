package controller

// The Kueue integration (docs/kueue.md). A run that names a LocalQueue (the
// kueue.x-k8s.io/queue-name label) is one Kueue Workload, which the controller creates and
// owns, as Kueue's own job reconciler does for the jobs it integrates: Kueue
// (integrations.externalFrameworks: TrainingRun.v1alpha1.faultline.dev) knows the attempts'
// Jobs for children of the run, and the Workload, not the Jobs, is what it queues, admits,
// preempts and counts against quota. The run starts no attempt until the Workload is
// admitted; every attempt's pods get the admitted flavors' node selectors and tolerations; a
// restart stays inside the admission; an eviction suspends the run, which spends nothing,
// gives the quota back once its last worker is gone, and resumes with a fresh attempt when
// admitted again.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/exitclass"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=get;update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get

// newWorkloadObject is an empty unstructured Workload, for reads.
func newWorkloadObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kueue.WorkloadGVK)
	return u
}

// queueGate keeps a run that names a queue in step with its Workload. It runs before the
// run's own steps and reports whether the reconcile ends here (done): while the Workload is
// not admitted, the run stays suspended (its workers stopped, nothing counted), and every
// change of the Workload the run must reflect is written first.
func (r *Reconciler) queueGate(ctx context.Context, run *v1alpha1.TrainingRun) (res ctrl.Result, done bool, err error) {
	before := run.Status.DeepCopy()
	finished := run.Status.Phase == v1alpha1.PhaseSucceeded || run.Status.Phase == v1alpha1.PhaseFailed
	if !r.Kueue {
		if finished {
			return res, false, nil
		}
		res, err = r.stall(ctx, run, v1alpha1.ReasonKueueOff, fmt.Sprintf("the run names Kueue queue %q (label %s) and this controller runs without the Kueue integration: it starts no worker that would bypass the queue (launcher controller --kueue)", kueue.QueueName(run), v1alpha1.LabelQueueName))
		return res, true, err
	}
	u := newWorkloadObject()
	err = r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: kueue.WorkloadName(run)}, u)
	switch {
	case apierrors.IsNotFound(err):
		if finished {
			return res, false, nil
		}
		res, err = r.createWorkload(ctx, run)
		return res, true, err
	case err != nil:
		return res, true, fmt.Errorf("get workload %s: %w", kueue.WorkloadName(run), err)
	}
	if owner := metav1.GetControllerOf(u); owner == nil || owner.UID != run.UID {
		res, err = r.stall(ctx, run, v1alpha1.ReasonWorkloadTaken, fmt.Sprintf("Workload %s exists and is not this run's: delete it, or the run, to queue it", u.GetName()))
		return res, true, err
	}
	wl, err := kueue.Parse(u)
	if err != nil {
		return res, true, err
	}
	if finished {
		// Finished gives the quota back; the run's own steps (the TTL) go on.
		return res, false, r.workloadConditions(ctx, u, kueue.Finished(run))
	}
	if wantActive := !ptr.Deref(run.Spec.Suspend, false); wl.Active() != wantActive {
		// A suspended run gives its quota back: Kueue evicts an inactive Workload.
		patch := []byte(fmt.Sprintf(`{"spec":{"active":%t}}`, wantActive))
		if err := r.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return res, true, fmt.Errorf("set workload %s spec.active=%t: %w", u.GetName(), wantActive, err)
		}
		return res, true, nil
	}
	admitted := wl.Admitted()
	if c := wl.Condition(kueue.ConditionPodsReady); admitted || (c != nil && c.Reason != kueue.ReasonWaitForStart) {
		// After an eviction the next admission must start afresh (WaitForStart), as Kueue's
		// own job reconciler has it.
		allReady := run.Status.Phase == v1alpha1.PhaseRunning && run.Status.ReadyWorkers >= run.Spec.Workers
		want := kueue.PodsReady(c, kueue.RunState{AllReady: allReady, Attempt: max(run.Status.Attempt, 1)}, admitted)
		if c == nil || c.Status != want.Status || c.Reason != want.Reason {
			if err := r.workloadConditions(ctx, u, want); err != nil {
				return res, true, err
			}
		}
	}
	newlyAdmitted := reflectWorkload(run, wl, r.now())
	if e := run.Status.Queue.LastEviction; e != nil && e.Reason == kueue.EvictedByPreemption && e.Preemptor == "" {
		e.Preemptor = r.preemptor(ctx, e.Message)
	}
	if newlyAdmitted {
		r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonAdmitted, v1alpha1.ActionQueue, "%s", admittedMessage(run.Status.Queue))
	}
	if admitted {
		if !equality.Semantic.DeepEqual(&run.Status, before) {
			return res, true, r.writeStatus(ctx, run)
		}
		return res, false, nil
	}
	return r.holdQueued(ctx, run, before, u, wl)
}

// holdQueued keeps a run whose Workload is not admitted from running: before its first
// attempt it only says so; later, its attempt is suspended (as a preemption, which spends no
// restart) and, once its last worker is gone, the Workload's quota is given back.
func (r *Reconciler) holdQueued(ctx context.Context, run *v1alpha1.TrainingRun, before *v1alpha1.TrainingRunStatus, u *unstructured.Unstructured, wl *kueue.Workload) (ctrl.Result, bool, error) {
	st := &run.Status
	ev := wl.Eviction()
	if st.Attempt == 0 {
		st.Phase = v1alpha1.PhaseSuspended
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonQueued, Message: queuedMessage(run, wl)})
		if !equality.Semantic.DeepEqual(&run.Status, before) {
			return ctrl.Result{}, true, r.writeStatus(ctx, run)
		}
		return ctrl.Result{}, true, nil
	}
	obs, err := r.observe(ctx, run)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	var res ctrl.Result
	if ptr.Deref(run.Spec.Suspend, false) {
		// The user's suspend: the run's own step says so, and stops the workers.
		res, err = r.suspend(ctx, run, obs)
	} else {
		reason, why := v1alpha1.ReasonQueued, "Kueue: workload "+wl.Name+" is not admitted"
		if ev != nil {
			reason, why = v1alpha1.ReasonEvictedByKueue, fmt.Sprintf("Kueue (%s): %s", ev.Reason, ev.Message)
			if ev.Reason == kueue.EvictedByPreemption {
				reason = v1alpha1.ReasonPreempted
				if e := st.Queue.LastEviction; e != nil && e.Preemptor != "" {
					why = fmt.Sprintf("Kueue (%s) for workload %s: %s", ev.Reason, e.Preemptor, ev.Message)
				}
			}
		}
		res, err = r.suspendFor(ctx, run, obs, reason, why)
	}
	if err != nil {
		return res, true, err
	}
	if ev == nil || !wl.HoldsQuota() {
		return res, true, nil
	}
	if obs.job != nil || slices.ContainsFunc(obs.all, func(p *corev1.Pod) bool { return !exitclass.Gone(p, obs.nodes) }) {
		return res, true, nil // the workers' deletions wake the run again
	}
	// Only now may another workload have the quota: before, two gangs would hold the nodes.
	if _, err := kueue.ClearAdmission(u, ev, r.now().Time); err != nil {
		return res, true, err
	}
	if err := r.Status().Update(ctx, u); err != nil {
		return res, true, fmt.Errorf("clear the admission of workload %s: %w", u.GetName(), err)
	}
	return res, true, nil
}

// createWorkload creates run's Workload and says so in the run's status.
func (r *Reconciler) createWorkload(ctx context.Context, run *v1alpha1.TrainingRun) (ctrl.Result, error) {
	prio, err := r.priority(ctx, run)
	if err != nil {
		return r.stall(ctx, run, v1alpha1.ReasonWorkloadRefused, err.Error())
	}
	roles, err := r.layout(ctx, run)
	if err != nil {
		return r.pluginNotReady(ctx, run, err)
	}
	sets, err := kueue.PodSets(run, roles)
	if err != nil {
		return r.stall(ctx, run, v1alpha1.ReasonWorkloadRefused, err.Error())
	}
	u, err := kueue.NewWorkload(run, sets, prio)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return r.stall(ctx, run, v1alpha1.ReasonWorkloadRefused, fmt.Sprintf("the API server (or Kueue's webhook) refused the run's Workload %s: %s", u.GetName(), apiMessage(err)))
		}
		return ctrl.Result{}, fmt.Errorf("create workload %s: %w", u.GetName(), err)
	}
	st := &run.Status
	st.Queue = &v1alpha1.QueueStatus{Name: kueue.QueueName(run), Workload: u.GetName()}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQueued, Message: fmt.Sprintf("workload %s waits in queue %s", u.GetName(), kueue.QueueName(run))})
	if err := r.writeStatus(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	r.event(run, corev1.EventTypeNormal, v1alpha1.ReasonQueued, v1alpha1.ActionQueue, "workload %s created in queue %s", u.GetName(), kueue.QueueName(run))
	return ctrl.Result{}, nil
}

// layout is the roles of a run with spec.roles, as its framework lays them out (its pod
// sets are per role); nil for a run without, whose pods are all alike.
func (r *Reconciler) layout(ctx context.Context, run *v1alpha1.TrainingRun) ([]kueue.Role, error) {
	if len(run.Spec.Roles) == 0 {
		return nil, nil
	}
	fw, err := r.Frameworks.Resolve(r.Episodes.Context(ctx, run), run)
	if err != nil {
		return nil, err
	}
	return kueueRoles(fw.Roles), nil
}

func kueueRoles(roles []framework.Role) []kueue.Role {
	out := make([]kueue.Role, 0, len(roles))
	for _, role := range roles {
		out = append(out, kueue.Role{Name: role.Name, Count: role.Replicas})
	}
	return out
}

// priority is the Workload's priority, as Kueue gives its jobs': the WorkloadPriorityClass
// the run's label names, else the PriorityClass of the workers' template, else none.
func (r *Reconciler) priority(ctx context.Context, run *v1alpha1.TrainingRun) (kueue.Priority, error) {
	if name := run.Labels[v1alpha1.LabelWorkloadPriorityClass]; name != "" {
		wpc := &unstructured.Unstructured{}
		wpc.SetGroupVersionKind(kueue.WorkloadPriorityClassGVK)
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, wpc); err != nil {
			return kueue.Priority{}, fmt.Errorf("label %s: WorkloadPriorityClass %s: %w", v1alpha1.LabelWorkloadPriorityClass, name, err)
		}
		v, _, _ := unstructured.NestedInt64(wpc.Object, "value")
		return kueue.Priority{Value: int32(v), Group: kueue.PriorityClassGroupWorkload, Kind: kueue.PriorityClassKindWorkload, Name: name}, nil
	}
	if name := run.Spec.Template.Spec.PriorityClassName; name != "" {
		pc := &schedulingv1.PriorityClass{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, pc); err != nil {
			return kueue.Priority{}, fmt.Errorf("spec.template.spec.priorityClassName: PriorityClass %s: %w", name, err)
		}
		return kueue.Priority{Value: pc.Value, Group: kueue.PriorityClassGroupPod, Kind: kueue.PriorityClassKindPod, Name: name}, nil
	}
	return kueue.Priority{}, nil
}

// preemptor names the workload whose UID Kueue's preemption message gives (it may be in
// another namespace of the ClusterQueue's cohort), or "" when it is gone or unreadable: the
// message still has the UID.
func (r *Reconciler) preemptor(ctx context.Context, message string) string {
	uid := kueue.PreemptorUID(message)
	if uid == "" {
		return ""
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(kueue.WorkloadGVK.GroupVersion().WithKind(kueue.WorkloadGVK.Kind + "List"))
	// Read once per preemption, across namespaces: the cache holds only this controller's own.
	if err := r.APIReader.List(ctx, list); err != nil {
		return ""
	}
	for i := range list.Items {
		if string(list.Items[i].GetUID()) != uid {
			continue
		}
		if w, err := kueue.Parse(&list.Items[i]); err == nil {
			return kueue.Describe(w)
		}
	}
	return ""
}

// workloadConditions writes conditions into the Workload's status, if they change it.
func (r *Reconciler) workloadConditions(ctx context.Context, u *unstructured.Unstructured, conds ...metav1.Condition) error {
	changed, err := kueue.SetConditions(u, r.now().Time, conds...)
	if err != nil || !changed {
		return err
	}
	if err := r.Status().Update(ctx, u); err != nil {
		return fmt.Errorf("update status of workload %s: %w", u.GetName(), err)
	}
	return nil
}

// reflectWorkload writes what the run shows of its Workload into its status (the admission,
// the Admitted condition, the evictions counted once each) and reports whether the Workload
// has just been admitted.
func reflectWorkload(run *v1alpha1.TrainingRun, wl *kueue.Workload, now metav1.Time) (newlyAdmitted bool) {
	st := &run.Status
	q := st.Queue
	if q == nil {
		q = &v1alpha1.QueueStatus{}
	}
	q = q.DeepCopy()
	q.Name, q.Workload = kueue.QueueName(run), wl.Name
	if ev := wl.Eviction(); ev != nil && (q.LastEviction == nil || !q.LastEviction.Time.Equal(&ev.LastTransitionTime)) {
		q.Evictions++
		q.LastEviction = &v1alpha1.QueueEviction{Reason: ev.Reason, Message: ev.Message, Time: ev.LastTransitionTime}
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQueued, Message: queuedMessage(run, wl)}
	if wl.Admitted() {
		a := wl.Status.Admission
		q.ClusterQueue = a.ClusterQueue
		q.Flavors = kueue.FlavorsOf(a)
		if c := wl.Condition(kueue.ConditionAdmitted); c != nil {
			q.AdmittedAt = ptr.To(c.LastTransitionTime)
		}
		cond = metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted, Message: admittedMessage(q)}
		if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionSuspended) && st.Attempt == 0 {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAdmitted, Message: admittedMessage(q)})
		}
	} else {
		q.ClusterQueue, q.Flavors, q.AdmittedAt = "", nil, nil
		if ev := wl.Eviction(); ev != nil {
			cond.Reason, cond.Message = v1alpha1.ReasonEvictedByKueue, fmt.Sprintf("Kueue evicted workload %s (%s): %s", wl.Name, ev.Reason, ev.Message)
			if ev.Reason == kueue.EvictedByPreemption {
				cond.Reason = v1alpha1.ReasonPreempted
			}
		}
	}
	st.Queue = q
	was := meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAdmitted)
	meta.SetStatusCondition(&st.Conditions, cond)
	return !was && cond.Status == metav1.ConditionTrue
}

func admittedMessage(q *v1alpha1.QueueStatus) string {
	msg := fmt.Sprintf("workload %s admitted by ClusterQueue %s", q.Workload, q.ClusterQueue)
	if len(q.Flavors) > 0 {
		var fl []string
		for _, res := range slices.Sorted(maps.Keys(q.Flavors)) {
			fl = append(fl, res+"="+q.Flavors[res])
		}
		msg += " (flavors " + strings.Join(fl, ", ") + ")"
	}
	return msg
}

func queuedMessage(run *v1alpha1.TrainingRun, wl *kueue.Workload) string {
	msg := fmt.Sprintf("workload %s waits for Kueue to admit it in queue %s", wl.Name, kueue.QueueName(run))
	if c := wl.Condition(kueue.ConditionQuotaReserved); c != nil && c.Status == metav1.ConditionFalse && c.Message != "" {
		msg += ": " + c.Message
	}
	for _, ac := range wl.Status.AdmissionChecks {
		if ac.State != kueue.CheckStateReady {
			msg += fmt.Sprintf("; admission check %s is %s", ac.Name, ac.State)
		}
	}
	return msg
}

// errNotAdmitted: the Workload lost its admission between the gate and the attempt's
// creation; the Workload's change brings the run back.
var errNotAdmitted = errors.New("workload not admitted")

// placeAdmitted puts the admission of a run that names a queue onto an attempt's Job: the
// node labels and tolerations of each pod set's flavors and what its admission checks ask,
// on every attempt, so that no attempt lands outside what Kueue admitted (kueue.Place), and
// only while the run's pods are still those the Workload was made with. It reports false
// when the attempt must not be created now (res says when to look again).
func (r *Reconciler) placeAdmitted(ctx context.Context, run *v1alpha1.TrainingRun, job *batchv1.Job, layout []framework.Role) (ctrl.Result, bool, error) {
	if kueue.QueueName(run) == "" || !r.Kueue {
		return ctrl.Result{}, true, nil
	}
	stall := func(reason, msg string) (ctrl.Result, bool, error) {
		res, err := r.stallFor(ctx, run, reason, jobRejectedRetry, msg)
		return res, false, err
	}
	sets, err := kueue.PodSets(run, kueueRoles(layout))
	if err != nil {
		return stall(v1alpha1.ReasonJobRejected, err.Error())
	}
	infos, outdated, err := r.admissionInfos(ctx, run, sets)
	switch {
	case errors.Is(err, errNotAdmitted):
		return ctrl.Result{}, false, nil
	case outdated != "":
		return stall(v1alpha1.ReasonWorkloadOutdated, outdated)
	}
	var roles []v1alpha1.RoleTemplate
	if err == nil {
		roles, err = attempt.RoleTemplates(job)
	}
	if err == nil {
		roles, err = kueue.Place(&job.Spec.Template, roles, infos)
	}
	if err != nil {
		return stall(v1alpha1.ReasonJobRejected, fmt.Sprintf("Kueue's admission cannot be applied to attempt %d's workers: %v", run.Status.Attempt, err))
	}
	attempt.SetRoleTemplates(job, roles)
	return ctrl.Result{}, true, nil
}

// admissionInfos are what the admission of run's Workload adds to the pods of each of its
// pod sets; outdated says why the Workload's pod sets are not sets any more.
func (r *Reconciler) admissionInfos(ctx context.Context, run *v1alpha1.TrainingRun, sets []kueue.PodSet) (map[string]kueue.PodSetInfo, string, error) {
	u := newWorkloadObject()
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: kueue.WorkloadName(run)}, u); err != nil {
		return nil, "", fmt.Errorf("get workload: %w", err)
	}
	wl, err := kueue.Parse(u)
	if err != nil {
		return nil, "", err
	}
	if !wl.Admitted() {
		return nil, "", errNotAdmitted
	}
	if why := wl.Outdated(sets); why != "" {
		return nil, why, nil
	}
	assigned, err := wl.Assignments(sets)
	if err != nil {
		return nil, "", err
	}
	flavors := map[string]*kueue.ResourceFlavor{}
	infos := make(map[string]kueue.PodSetInfo, len(assigned))
	for set, a := range assigned {
		for _, name := range a.FlavorNames() {
			if flavors[name] != nil {
				continue
			}
			f := &unstructured.Unstructured{}
			f.SetGroupVersionKind(kueue.ResourceFlavorGVK)
			if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, f); err != nil {
				return nil, "", fmt.Errorf("resource flavor %s: %w", name, err)
			}
			rf := &kueue.ResourceFlavor{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(f.Object, rf); err != nil {
				return nil, "", fmt.Errorf("resource flavor %s: %w", name, err)
			}
			flavors[name] = rf
		}
		if infos[set], err = kueue.Info(a, flavors, wl.Status.AdmissionChecks); err != nil {
			return nil, "", fmt.Errorf("pod set %s: %w", set, err)
		}
	}
	return infos, "", nil
}
