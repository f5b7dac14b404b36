package admission

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/kueue"
)

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=get;update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get

// kueueGate admits runs through their Kueue Workloads.
type kueueGate struct{ cfg Config }

var _ Gate = (*kueueGate)(nil)

// newWorkloadObject is an empty unstructured Workload, for reads.
func newWorkloadObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kueue.WorkloadGVK)
	return u
}

func (g *kueueGate) now() metav1.Time { return metav1.NewTime(g.cfg.Clock.Now()) }

// workload reads run's Workload from the cache.
func (g *kueueGate) workload(ctx context.Context, run *v1alpha1.TrainingRun) (*unstructured.Unstructured, error) {
	u := newWorkloadObject()
	return u, g.cfg.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: kueue.WorkloadName(run)}, u)
}

// Sync keeps a run that names a queue in step with its Workload: while the Workload is not
// admitted the run holds (its workers stopped, nothing counted), and every change of the
// Workload the run must reflect is in its status first.
func (g *kueueGate) Sync(ctx context.Context, run *v1alpha1.TrainingRun) (Admission, error) {
	if kueue.QueueName(run) == "" {
		return Admission{Proceed: true}, nil
	}
	u, err := g.workload(ctx, run)
	switch {
	case apierrors.IsNotFound(err):
		if finished(run) {
			return Admission{Proceed: true}, nil
		}
		return g.create(ctx, run)
	case err != nil:
		return Admission{}, fmt.Errorf("get workload %s: %w", kueue.WorkloadName(run), err)
	}
	if owner := metav1.GetControllerOf(u); owner == nil || owner.UID != run.UID {
		return Admission{Stall: &Stall{Reason: v1alpha1.ReasonWorkloadTaken, Message: fmt.Sprintf("Workload %s exists and is not this run's: delete it, or the run, to queue it", u.GetName())}}, nil
	}
	wl, err := kueue.Parse(u)
	if err != nil {
		return Admission{}, err
	}
	if finished(run) {
		// Finished gives the quota back; the run's own steps (the TTL) go on.
		return Admission{Proceed: true}, g.workloadConditions(ctx, u, kueue.Finished(run))
	}
	if wantActive := !ptr.Deref(run.Spec.Suspend, false); wl.Active() != wantActive {
		// A suspended run gives its quota back: Kueue evicts an inactive Workload.
		patch := []byte(fmt.Sprintf(`{"spec":{"active":%t}}`, wantActive))
		if err := g.cfg.Client.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return Admission{}, fmt.Errorf("set workload %s spec.active=%t: %w", u.GetName(), wantActive, err)
		}
		return Admission{}, nil
	}
	admitted := wl.Admitted()
	if c := wl.Condition(kueue.ConditionPodsReady); admitted || (c != nil && c.Reason != kueue.ReasonWaitForStart) {
		// After an eviction the next admission must start afresh (WaitForStart), as Kueue's
		// own job reconciler has it.
		allReady := run.Status.Phase == v1alpha1.PhaseRunning && run.Status.ReadyWorkers >= run.Spec.Workers
		want := kueue.PodsReady(c, kueue.RunState{AllReady: allReady, Attempt: max(run.Status.Attempt, 1)}, admitted)
		if c == nil || c.Status != want.Status || c.Reason != want.Reason {
			if err := g.workloadConditions(ctx, u, want); err != nil {
				return Admission{}, err
			}
		}
	}
	var a Admission
	if reflectWorkload(run, wl, g.now()) {
		a.Events = append(a.Events, Event{corev1.EventTypeNormal, v1alpha1.ReasonAdmitted, v1alpha1.ActionQueue, admittedMessage(run.Status.Queue)})
	}
	if e := run.Status.Queue.LastEviction; e != nil && e.Reason == kueue.EvictedByPreemption && e.Preemptor == "" {
		e.Preemptor = g.preemptor(ctx, e.Message)
	}
	if admitted {
		a.Proceed = true
		return a, nil
	}
	a.Hold = hold(run, wl)
	return a, nil
}

// hold is how a run whose Workload is not admitted holds: before its first attempt it is
// suspended and says why (here); later, its attempt is suspended as a preemption, which
// spends no restart, and the Workload's quota is given back once its last worker is gone.
func hold(run *v1alpha1.TrainingRun, wl *kueue.Workload) *Hold {
	st := &run.Status
	if st.Attempt == 0 {
		st.Phase = v1alpha1.PhaseSuspended
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonQueued, Message: queuedMessage(run, wl)})
		return &Hold{}
	}
	ev := wl.Eviction()
	h := &Hold{Reason: v1alpha1.ReasonQueued, Message: "Kueue: workload " + wl.Name + " is not admitted", ReleaseQuota: ev != nil && wl.HoldsQuota()}
	if ev != nil {
		h.Reason, h.Message = v1alpha1.ReasonEvictedByKueue, fmt.Sprintf("Kueue (%s): %s", ev.Reason, ev.Message)
		if ev.Reason == kueue.EvictedByPreemption {
			h.Reason = v1alpha1.ReasonPreempted
			if e := st.Queue.LastEviction; e != nil && e.Preemptor != "" {
				h.Message = fmt.Sprintf("Kueue (%s) for workload %s: %s", ev.Reason, e.Preemptor, ev.Message)
			}
		}
	}
	return h
}

// ReleaseQuota clears the admission of run's evicted Workload: only now may another
// workload have the quota.
func (g *kueueGate) ReleaseQuota(ctx context.Context, run *v1alpha1.TrainingRun) error {
	u, err := g.workload(ctx, run)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	wl, err := kueue.Parse(u)
	if err != nil {
		return err
	}
	ev := wl.Eviction()
	if ev == nil || !wl.HoldsQuota() {
		return nil
	}
	if _, err := kueue.ClearAdmission(u, ev, g.now().Time); err != nil {
		return err
	}
	if err := g.cfg.Client.Status().Update(ctx, u); err != nil {
		return fmt.Errorf("clear the admission of workload %s: %w", u.GetName(), err)
	}
	return nil
}

// create creates run's Workload and says so in the run's status.
func (g *kueueGate) create(ctx context.Context, run *v1alpha1.TrainingRun) (Admission, error) {
	refused := func(msg string) (Admission, error) {
		return Admission{Stall: &Stall{Reason: v1alpha1.ReasonWorkloadRefused, Message: msg}}, nil
	}
	prio, err := g.priority(ctx, run)
	if err != nil {
		return refused(err.Error())
	}
	var roles []kueue.Role
	if len(run.Spec.Roles) > 0 {
		layout, err := g.cfg.Roles(ctx, run)
		if err != nil {
			return Admission{PluginErr: err}, nil
		}
		roles = kueueRoles(layout)
	}
	sets, err := kueue.PodSets(run, roles)
	if err != nil {
		return refused(err.Error())
	}
	u, err := kueue.NewWorkload(run, sets, prio)
	if err != nil {
		return Admission{}, err
	}
	if err := g.cfg.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return refused(fmt.Sprintf("the API server (or Kueue's webhook) refused the run's Workload %s: %s", u.GetName(), apiMessage(err)))
		}
		return Admission{}, fmt.Errorf("create workload %s: %w", u.GetName(), err)
	}
	st := &run.Status
	st.Queue = &v1alpha1.QueueStatus{Name: kueue.QueueName(run), Workload: u.GetName()}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQueued, Message: fmt.Sprintf("workload %s waits in queue %s", u.GetName(), kueue.QueueName(run))})
	return Admission{Events: []Event{{corev1.EventTypeNormal, v1alpha1.ReasonQueued, v1alpha1.ActionQueue, fmt.Sprintf("workload %s created in queue %s", u.GetName(), kueue.QueueName(run))}}}, nil
}

// apiMessage is the API server's own message of a refusal.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// Watches wakes a run at every change of its Workload: an admission, an eviction, a lost
// admission check.
func (g *kueueGate) Watches(b *builder.Builder, runOf handler.MapFunc) *builder.Builder {
	return b.Watches(newWorkloadObject(), handler.EnqueueRequestsFromMapFunc(runOf))
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
func (g *kueueGate) priority(ctx context.Context, run *v1alpha1.TrainingRun) (kueue.Priority, error) {
	if name := run.Labels[v1alpha1.LabelWorkloadPriorityClass]; name != "" {
		wpc := &unstructured.Unstructured{}
		wpc.SetGroupVersionKind(kueue.WorkloadPriorityClassGVK)
		if err := g.cfg.APIReader.Get(ctx, types.NamespacedName{Name: name}, wpc); err != nil {
			return kueue.Priority{}, fmt.Errorf("label %s: WorkloadPriorityClass %s: %w", v1alpha1.LabelWorkloadPriorityClass, name, err)
		}
		v, _, _ := unstructured.NestedInt64(wpc.Object, "value")
		return kueue.Priority{Value: int32(v), Group: kueue.PriorityClassGroupWorkload, Kind: kueue.PriorityClassKindWorkload, Name: name}, nil
	}
	if name := run.Spec.Template.Spec.PriorityClassName; name != "" {
		pc := &schedulingv1.PriorityClass{}
		if err := g.cfg.APIReader.Get(ctx, types.NamespacedName{Name: name}, pc); err != nil {
			return kueue.Priority{}, fmt.Errorf("spec.template.spec.priorityClassName: PriorityClass %s: %w", name, err)
		}
		return kueue.Priority{Value: pc.Value, Group: kueue.PriorityClassGroupPod, Kind: kueue.PriorityClassKindPod, Name: name}, nil
	}
	return kueue.Priority{}, nil
}

// preemptor names the workload whose UID Kueue's preemption message gives (it may be in
// another namespace of the ClusterQueue's cohort), or "" when it is gone or unreadable: the
// message still has the UID.
func (g *kueueGate) preemptor(ctx context.Context, message string) string {
	uid := kueue.PreemptorUID(message)
	if uid == "" {
		return ""
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(kueue.WorkloadGVK.GroupVersion().WithKind(kueue.WorkloadGVK.Kind + "List"))
	// Read once per preemption, across namespaces: the cache holds only this controller's own.
	if err := g.cfg.APIReader.List(ctx, list); err != nil {
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
func (g *kueueGate) workloadConditions(ctx context.Context, u *unstructured.Unstructured, conds ...metav1.Condition) error {
	changed, err := kueue.SetConditions(u, g.now().Time, conds...)
	if err != nil || !changed {
		return err
	}
	if err := g.cfg.Client.Status().Update(ctx, u); err != nil {
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

// Place puts the admission of a run that names a queue onto an attempt's Job (kueue.Place),
// only while the run's pods are still those the Workload was made with.
func (g *kueueGate) Place(ctx context.Context, run *v1alpha1.TrainingRun, job *batchv1.Job, layout []framework.Role) (Placement, error) {
	if kueue.QueueName(run) == "" {
		return Placement{Ready: true}, nil
	}
	stall := func(reason, msg string) (Placement, error) {
		return Placement{Stall: &Stall{Reason: reason, Message: msg}}, nil
	}
	sets, err := kueue.PodSets(run, kueueRoles(layout))
	if err != nil {
		return stall(v1alpha1.ReasonJobRejected, err.Error())
	}
	infos, outdated, err := g.admissionInfos(ctx, run, sets)
	switch {
	case errors.Is(err, errNotAdmitted):
		return Placement{}, nil
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
	return Placement{Ready: true}, nil
}

// admissionInfos are what the admission of run's Workload adds to the pods of each of its
// pod sets; outdated says why the Workload's pod sets are not sets any more.
func (g *kueueGate) admissionInfos(ctx context.Context, run *v1alpha1.TrainingRun, sets []kueue.PodSet) (map[string]kueue.PodSetInfo, string, error) {
	u, err := g.workload(ctx, run)
	if err != nil {
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
			if err := g.cfg.APIReader.Get(ctx, types.NamespacedName{Name: name}, f); err != nil {
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
