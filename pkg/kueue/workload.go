package kueue

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// QueueName is the LocalQueue that run names ("" when it names none).
func QueueName(run *v1alpha1.TrainingRun) string { return run.Labels[v1alpha1.LabelQueueName] }

// maxNameLength is a Workload name's limit (a DNS subdomain).
const maxNameLength = 253

// WorkloadName is the name of run's Workload: "trainingrun-<run>-<hash>", as Kueue names the
// Workloads of the jobs it integrates, the hash over the run's kind, group, name and UID: a
// run deleted and made again under the same name gets another Workload.
func WorkloadName(run *v1alpha1.TrainingRun) string {
	h := sha1.New()
	for _, s := range []string{v1alpha1.KindTrainingRun, "\n", v1alpha1.GroupName, "\n", run.Name, "\n", string(run.UID)} {
		h.Write([]byte(s))
	}
	hash := hex.EncodeToString(h.Sum(nil))[:5]
	prefix := strings.ToLower(v1alpha1.KindTrainingRun) + "-" + run.Name
	if max := maxNameLength - 1 - len(hash); len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + "-" + hash
}

// Priority is the Workload's priority: its value, and the class it comes from (none: 0).
type Priority struct {
	Value int32
	// Group and Kind of the class (PriorityClassGroupPod/KindPod or …Workload), and its Name.
	Group, Kind, Name string
}

// NewWorkload is run's Workload: owned by the run (its controller), in its LocalQueue, with
// the run's pod sets (PodSets) and their digest (AnnotationPodSets).
func NewWorkload(run *v1alpha1.TrainingRun, sets []PodSet, prio Priority) (*unstructured.Unstructured, error) {
	podSets := make([]any, 0, len(sets))
	for _, set := range sets {
		t, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&set.Template)
		if err != nil {
			return nil, fmt.Errorf("pod set %s: %w", set.Name, err)
		}
		// Zero timestamps convert to null, which the Workload's schema refuses.
		unstructured.RemoveNestedField(t, "metadata", "creationTimestamp")
		podSets = append(podSets, map[string]any{"name": set.Name, "count": int64(set.Count), "template": t})
	}
	spec := map[string]any{
		"queueName": QueueName(run),
		"podSets":   podSets,
	}
	if prio.Name != "" {
		spec["priorityClassRef"] = map[string]any{"group": prio.Group, "kind": prio.Kind, "name": prio.Name}
		spec["priority"] = int64(prio.Value)
	}
	if ptr.Deref(run.Spec.Suspend, false) {
		spec["active"] = false // a run created suspended waits for its resume to queue
	}
	owner := metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": WorkloadGVK.GroupVersion().String(),
		"kind":       WorkloadGVK.Kind,
		"metadata": map[string]any{
			"name":      WorkloadName(run),
			"namespace": run.Namespace,
			"labels": map[string]any{
				v1alpha1.LabelRun:    run.Name,
				v1alpha1.LabelRunUID: string(run.UID),
				LabelJobUID:          string(run.UID),
			},
			"annotations": map[string]any{v1alpha1.AnnotationPodSets: Digest(sets)},
		},
		"spec": spec,
	}}
	u.SetOwnerReferences([]metav1.OwnerReference{*owner})
	return u, nil
}

// Parse reads the fields of a Workload that faultline uses.
func Parse(u *unstructured.Unstructured) (*Workload, error) {
	w := &Workload{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, w); err != nil {
		return nil, fmt.Errorf("workload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return w, nil
}

// Condition is the Workload's condition of type t, or nil.
func (w *Workload) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(w.Status.Conditions, t)
}

func (w *Workload) isTrue(t string) bool {
	return meta.IsStatusConditionTrue(w.Status.Conditions, t)
}

// Admitted reports whether the run may run: Kueue reserved its quota, every admission check
// is Ready (Admitted=True says both), and it has not evicted it since.
func (w *Workload) Admitted() bool {
	return w.isTrue(ConditionQuotaReserved) && w.isTrue(ConditionAdmitted) && !w.isTrue(ConditionEvicted) && !w.isTrue(ConditionFinished)
}

// Eviction is Kueue's Evicted=True condition, or nil while the Workload is not evicted.
func (w *Workload) Eviction() *metav1.Condition {
	if c := w.Condition(ConditionEvicted); c != nil && c.Status == metav1.ConditionTrue {
		return c
	}
	return nil
}

// HoldsQuota reports whether Kueue counts the Workload against its ClusterQueue's quota.
func (w *Workload) HoldsQuota() bool {
	return w.isTrue(ConditionQuotaReserved) && w.Status.Admission != nil && !w.isTrue(ConditionFinished)
}

// Active is spec.active (true when unset).
func (w *Workload) Active() bool { return ptr.Deref(w.Spec.Active, true) }

// FlavorNames are the distinct flavors of an assignment, sorted.
func (a *PodSetAssignment) FlavorNames() []string {
	names := slices.Collect(maps.Values(a.Flavors))
	slices.Sort(names)
	return slices.Compact(names)
}

// PodSetInfo is what an admission puts on every pod of the pod set, as Kueue's podset.Merge
// puts it on the pods of the jobs it integrates.
type PodSetInfo struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Labels       map[string]string
	Annotations  map[string]string
}

// Info gathers an admission's additions to the workers' pods: the node labels and
// tolerations of the assigned flavors (flavors must hold every one of them, by name), then
// what each admission check asks (status.admissionChecks[].podSetUpdates). Two sources
// that want one key with different values are an error, as in Kueue.
func Info(a *PodSetAssignment, flavors map[string]*ResourceFlavor, checks []AdmissionCheckState) (PodSetInfo, error) {
	info := PodSetInfo{}
	for _, name := range a.FlavorNames() {
		f, ok := flavors[name]
		if !ok {
			return info, fmt.Errorf("resource flavor %s of the admission not found", name)
		}
		if err := mergeInto(&info.NodeSelector, f.Spec.NodeLabels, "resource flavor "+name+" spec.nodeLabels"); err != nil {
			return info, err
		}
		info.Tolerations = appendNew(info.Tolerations, f.Spec.Tolerations)
	}
	for _, c := range checks {
		for _, u := range c.PodSetUpdates {
			if u.Name != a.Name {
				continue
			}
			what := "admission check " + c.Name + " podSetUpdates"
			if err := mergeInto(&info.NodeSelector, u.NodeSelector, what+".nodeSelector"); err != nil {
				return info, err
			}
			if err := mergeInto(&info.Labels, u.Labels, what+".labels"); err != nil {
				return info, err
			}
			if err := mergeInto(&info.Annotations, u.Annotations, what+".annotations"); err != nil {
				return info, err
			}
			info.Tolerations = appendNew(info.Tolerations, u.Tolerations)
		}
	}
	return info, nil
}

// Apply puts info onto a pod template. A key the template already has with another value
// is an error: the pods would land elsewhere than the admission placed them.
func Apply(tmpl *corev1.PodTemplateSpec, info PodSetInfo) error {
	if err := mergeInto(&tmpl.Spec.NodeSelector, info.NodeSelector, "spec.template.spec.nodeSelector"); err != nil {
		return err
	}
	if err := mergeInto(&tmpl.Labels, info.Labels, "spec.template.metadata.labels"); err != nil {
		return err
	}
	if err := mergeInto(&tmpl.Annotations, info.Annotations, "spec.template.metadata.annotations"); err != nil {
		return err
	}
	tmpl.Spec.Tolerations = appendNew(tmpl.Spec.Tolerations, info.Tolerations)
	return nil
}

func mergeInto(dst *map[string]string, src map[string]string, what string) error {
	for _, k := range slices.Sorted(maps.Keys(src)) {
		v := src[k]
		if old, ok := (*dst)[k]; ok && old != v {
			return fmt.Errorf("%s: %s=%s conflicts with %s=%s already there", what, k, v, k, old)
		}
		if *dst == nil {
			*dst = map[string]string{}
		}
		(*dst)[k] = v
	}
	return nil
}

func appendNew(dst, src []corev1.Toleration) []corev1.Toleration {
	for _, t := range src {
		if !slices.ContainsFunc(dst, func(d corev1.Toleration) bool {
			return d.MatchToleration(&t) && d.Value == t.Value && ptr.Equal(d.TolerationSeconds, t.TolerationSeconds)
		}) {
			dst = append(dst, t)
		}
	}
	return dst
}

// RunState is what of a run the Workload's PodsReady condition follows.
type RunState struct {
	// AllReady: every worker of the current attempt is Running and Ready.
	AllReady bool
	// Restarting: faultline is between two attempts of one admission (the old gang
	// stopping, the backoff, the new gang starting).
	Restarting bool
	// Attempt is the current attempt, for the message.
	Attempt int32
}

// PodsReady is the PodsReady condition the Workload should have, given the one it has. As
// Kueue's job reconciler writes it (False/WaitForStart until the pods first are ready,
// True/Started, then True/Recovered after a recovery), except that a faultline restart is
// False/GangRestarting rather than WaitForRecovery: Kueue's recoveryTimeout would evict a
// run whose restart is merely held (the old gang stopping, the backoff), and the run's own
// budgets and backoff bound it already. A gang that never started in this admission stays
// WaitForStart, whose timeout is Kueue's guard against pods that cannot be placed.
func PodsReady(cur *metav1.Condition, s RunState, admitted bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionPodsReady}
	started := cur != nil && (cur.Status == metav1.ConditionTrue || cur.Reason == v1alpha1.ReasonGangRestarting || cur.Reason == ReasonWaitForRecovery)
	switch {
	case !admitted:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonWaitForStart, "not admitted"
	case s.AllReady && started:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonRecovered
		if cur.Status == metav1.ConditionTrue && cur.Reason == ReasonStarted {
			c.Reason = ReasonStarted
		}
		c.Message = fmt.Sprintf("all workers of attempt %d are ready", s.Attempt)
	case s.AllReady:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonStarted, fmt.Sprintf("all workers of attempt %d are ready", s.Attempt)
	case started:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonGangRestarting
		c.Message = fmt.Sprintf("faultline restarts the gang as attempt %d within this admission", s.Attempt)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonWaitForStart, fmt.Sprintf("waiting for every worker of attempt %d to be ready", s.Attempt)
	}
	return c
}

// Finished is the Finished condition of a run that Succeeded or Failed: Kueue then releases
// its quota.
func Finished(run *v1alpha1.TrainingRun) metav1.Condition {
	c := metav1.Condition{Type: ConditionFinished, Status: metav1.ConditionTrue, Reason: ReasonSucceeded, Message: fmt.Sprintf("the run succeeded in attempt %d", run.Status.Attempt)}
	if run.Status.Phase == v1alpha1.PhaseFailed {
		c.Reason, c.Message = ReasonFailed, fmt.Sprintf("the run failed in attempt %d", run.Status.Attempt)
		if lf := run.Status.LastFailure; lf != nil {
			c.Message += ": " + string(lf.Cause)
		}
	}
	return c
}

// SetConditions sets conditions on the unstructured Workload u (as meta.SetStatusCondition
// does, a transition time only on a change of status) and reports whether any changed.
func SetConditions(u *unstructured.Unstructured, now time.Time, conds ...metav1.Condition) (bool, error) {
	w, err := Parse(u)
	if err != nil {
		return false, err
	}
	changed := false
	for _, c := range conds {
		c.LastTransitionTime = metav1.NewTime(now)
		c.ObservedGeneration = u.GetGeneration()
		if old := meta.FindStatusCondition(w.Status.Conditions, c.Type); old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		meta.SetStatusCondition(&w.Status.Conditions, c)
		changed = true
	}
	if !changed {
		return false, nil
	}
	return true, setConditionsField(u, w.Status.Conditions)
}

func setConditionsField(u *unstructured.Unstructured, conds []metav1.Condition) error {
	list := make([]any, 0, len(conds))
	for i := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return err
		}
		list = append(list, m)
	}
	return unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
}

// ClearAdmission gives the quota of an evicted Workload back, once the run has stopped every
// worker, as Kueue's job reconciler does for its jobs: status.admission goes, QuotaReserved
// and Admitted become False, and a preemption (or TAS's node replacement giving up) is
// marked Requeued, so that Kueue queues the Workload again. It reports whether u changed.
func ClearAdmission(u *unstructured.Unstructured, eviction *metav1.Condition, now time.Time) (bool, error) {
	w, err := Parse(u)
	if err != nil {
		return false, err
	}
	if w.Status.Admission == nil && !w.isTrue(ConditionQuotaReserved) {
		return false, nil
	}
	unstructured.RemoveNestedField(u.Object, "status", "admission")
	requeued := metav1.ConditionFalse
	if eviction.Reason == EvictedByPreemption || eviction.Reason == EvictedDueToNodeFailures {
		requeued = metav1.ConditionTrue
	}
	_, err = SetConditions(u, now,
		metav1.Condition{Type: ConditionQuotaReserved, Status: metav1.ConditionFalse, Reason: ReasonPending, Message: eviction.Message},
		metav1.Condition{Type: ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "NoReservation", Message: "The workload has no reservation"},
		metav1.Condition{Type: ConditionRequeued, Status: requeued, Reason: eviction.Reason, Message: eviction.Message},
	)
	return true, err
}

// preemptorUID finds the preempting workload's UID in Kueue's preemption message
// ("Preempted to accommodate a workload (UID: <uid>, JobUID: <uid>) due to ...").
var preemptorUID = regexp.MustCompile(`\(UID: ([0-9a-fA-F-]+)`)

// PreemptorUID is the UID of the workload that Kueue's eviction message says preempted this
// one, or "".
func PreemptorUID(message string) string {
	if m := preemptorUID.FindStringSubmatch(message); m != nil {
		return m[1]
	}
	return ""
}

// Describe names a Workload for people: namespace/name and the job that owns it (Kind
// namespace/name), as Kueue's preemption message does not.
func Describe(w *Workload) string {
	s := w.Namespace + "/" + w.Name
	if o := metav1.GetControllerOf(w); o != nil {
		s += fmt.Sprintf(" (%s %s/%s)", o.Kind, w.Namespace, o.Name)
	}
	return s
}
