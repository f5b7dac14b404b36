// Package attempt builds the Indexed Job of one attempt of a TrainingRun. It is pure: the
// controller decides which attempt to build and where it must not run; this package says
// what that Job is.
//
// Every attempt's Job is named after the run, so per-index DNS names stay the same across
// attempts; the attempt number is a label on the Job and on its pods, which is how the
// controller tells the pods of a finished attempt from those of the next.
package attempt

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpuclaim"
	"github.com/faultline-dev/faultline/pkg/rendezvous"
)

// Options are what the controller decided about the attempt.
type Options struct {
	// Attempt is the attempt number, from 1.
	Attempt int32
	// ExcludedNodes are kept off with a required node affinity.
	ExcludedNodes []string
	// Env is the framework's environment, appended after the common FAULTLINE_* variables
	// so that it can refer to them with $(VAR).
	Env []corev1.EnvVar
	// Ports are the framework's container ports, declared on the first container unless
	// the user declared the same port number there.
	Ports []corev1.ContainerPort
	// Traceparent, when set, is copied onto the pods so that the node agent's spans join
	// the restart's trace.
	Traceparent string
	// RoleRanges, when set, is the layout of the framework's roles (the value of
	// v1alpha1.AnnotationRoles, framework.RoleRanges): written on the pod template, and every
	// container gets its pod's role and index within the role (rendezvous.RoleEnv) after the
	// common variables.
	RoleRanges string
	// ServiceAccountName, when set, is the workers' service account, unless the template
	// names its own.
	ServiceAccountName string
	// BarrierImage, when set, gives the pods the shape of a pod that restarts in place
	// (InPlaceShape): a RestartAllContainers rule on every worker container, and the
	// barrier of this image, before them.
	BarrierImage string
	// BarrierInWorker puts the barrier in the worker container itself, as its entrypoint
	// (`faultline-barrier supervise -- COMMAND`, from an image volume of BarrierImage),
	// where the template allows it (BarrierCanBeWorker); else it is an init container.
	// That barrier stays, with the worker as its child: the node agent's stop ends the
	// worker and the barrier waits again in the same container, which the kubelet never
	// restarts.
	BarrierInWorker bool
	// PodGroup, when set, puts the workers in the scheduling group of that name
	// (spec.schedulingGroup; package podgroup), whose gang policy binds them all or none.
	PodGroup string
}

// Number reads the attempt label of a Job or pod; ok is false when it is missing or garbled.
func Number(obj metav1.Object) (n int32, ok bool) {
	v, err := strconv.ParseInt(obj.GetLabels()[v1alpha1.LabelAttempt], 10, 32)
	if err != nil || v < 1 {
		return 0, false
	}
	return int32(v), true
}

// Record is the history entry of run's current attempt, nil if there is none.
func Record(run *v1alpha1.TrainingRun) *v1alpha1.AttemptRecord {
	h := run.Status.Attempts
	if len(h) == 0 || h[len(h)-1].Attempt != run.Status.Attempt {
		return nil
	}
	return &h[len(h)-1]
}

// RecordOf is st's history entry of attempt n, nil if it has none.
func RecordOf(st *v1alpha1.TrainingRunStatus, n int32) *v1alpha1.AttemptRecord {
	for i := range st.Attempts {
		if st.Attempts[i].Attempt == n {
			return &st.Attempts[i]
		}
	}
	return nil
}

// Ended reports whether st records attempt n as ended.
func Ended(st *v1alpha1.TrainingRunStatus, n int32) bool {
	rec := RecordOf(st, n)
	return rec != nil && rec.EndTime != nil
}

// JobAttempt is the attempt whose Job run's current attempt runs in: its own, unless it
// restarted in place (then the Job, and the pods made since it, are the attempt's before).
// The controller and the node agent both select the current attempt's pods by it: those
// made for JobAttempt or later.
func JobAttempt(run *v1alpha1.TrainingRun) int32 {
	if rec := Record(run); rec != nil && rec.JobAttempt > 0 {
		return rec.JobAttempt
	}
	return run.Status.Attempt
}

// ReportedExit is the exit of a worker of pod that its node agent reported
// (v1alpha1.AnnotationWorkerExit, on a pod that restarts in place, whose status never shows
// its worker's own exit); ok is false when there is none, or it does not parse.
func ReportedExit(pod *corev1.Pod) (ex v1alpha1.WorkerExit, ok bool) {
	raw, found := pod.Annotations[v1alpha1.AnnotationWorkerExit]
	if !found || json.Unmarshal([]byte(raw), &ex) != nil {
		return v1alpha1.WorkerExit{}, false
	}
	return ex, true
}

// ProgressWatched: the node agents watch the progress of the run's workers (a progress
// deadline, on a gang: restartScope Index has no deadline).
func ProgressWatched(run *v1alpha1.TrainingRun) bool {
	return run.Spec.FailurePolicy.ProgressDeadlineSeconds != nil && run.Spec.RestartScope != v1alpha1.RestartScopeIndex
}

// Index reads a pod's completion index from the annotation the Job controller writes,
// falling back to the label of the same name; ok is false when both are missing or garbled.
func Index(pod metav1.Object) (i int, ok bool) {
	v, found := pod.GetAnnotations()[batchv1.JobCompletionIndexAnnotation]
	if !found {
		v = pod.GetLabels()[batchv1.JobCompletionIndexAnnotation]
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// NoIndex stands for the completion index of a pod that has none, where an int is wanted
// (an index in a verdict, a report, a map by index).
const NoIndex = -1

// IndexOrNone is Index, with NoIndex for a pod without an index.
func IndexOrNone(pod metav1.Object) int {
	if i, ok := Index(pod); ok {
		return i
	}
	return NoIndex
}

// Labels are the labels of an attempt's Job and pods.
func Labels(run *v1alpha1.TrainingRun, attempt int32) map[string]string {
	return map[string]string{
		v1alpha1.LabelRun:     run.Name,
		v1alpha1.LabelRunUID:  string(run.UID),
		v1alpha1.LabelAttempt: strconv.Itoa(int(attempt)),
	}
}

// OfRun reports whether obj (a pod, Job or Service with the run label) is run's own rather
// than a leftover of an earlier run of the same name: its run-uid label says so. An object
// made before that label existed counts as the run's when it is no older than the run.
func OfRun(obj metav1.Object, run *v1alpha1.TrainingRun) bool {
	if uid, ok := obj.GetLabels()[v1alpha1.LabelRunUID]; ok {
		return uid == string(run.UID)
	}
	return !obj.GetCreationTimestamp().Time.Before(run.CreationTimestamp.Time)
}

// Job is the Indexed Job of an attempt: one pod per index (completions = parallelism =
// workers), never two at once (podReplacementPolicy Failed), and a podFailurePolicy that
// hands every failure decision to faultline.
func Job(run *v1alpha1.TrainingRun, opts Options) *batchv1.Job {
	labels := Labels(run, opts.Attempt)
	tmpl := *run.Spec.Template.DeepCopy()
	gpuclaim.Apply(&tmpl.Spec, run)
	tmpl.Labels = merge(tmpl.Labels, labels)
	if opts.Traceparent != "" {
		tmpl.Annotations = merge(tmpl.Annotations, map[string]string{v1alpha1.AnnotationTraceparent: opts.Traceparent})
	}
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Subdomain = rendezvous.ServiceName(run)
	if opts.RoleRanges != "" {
		tmpl.Annotations = merge(tmpl.Annotations, map[string]string{v1alpha1.AnnotationRoles: opts.RoleRanges})
	}
	if ProgressWatched(run) {
		// For the node agent, which watches its node's workers' progress (it reads pods, not
		// runs): the attempt keeps the deadline it started with.
		d := *run.Spec.FailurePolicy.ProgressDeadlineSeconds
		tmpl.Annotations = merge(tmpl.Annotations, map[string]string{v1alpha1.AnnotationProgressDeadline: strconv.Itoa(int(d))})
	}
	if opts.ServiceAccountName != "" && tmpl.Spec.ServiceAccountName == "" {
		tmpl.Spec.ServiceAccountName = opts.ServiceAccountName
	}
	env := rendezvous.Env(run, opts.Attempt)
	if opts.RoleRanges != "" {
		env = append(env, rendezvous.RoleEnv()...)
	}
	env = append(env, opts.Env...)
	for i := range tmpl.Spec.InitContainers {
		tmpl.Spec.InitContainers[i].Env = append(append([]corev1.EnvVar{}, env...), tmpl.Spec.InitContainers[i].Env...)
	}
	for i := range tmpl.Spec.Containers {
		c := &tmpl.Spec.Containers[i]
		c.Env = append(append([]corev1.EnvVar{}, env...), c.Env...)
		if c.TerminationMessagePolicy == "" {
			// TensorFlow, JAX and PyTorch never write /dev/termination-log: without the
			// fallback a failed worker's message is empty, and no framework hint can read
			// the error it printed. The kubelet keeps the log's last 80 lines, 2 KiB at most.
			c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		}
	}
	if opts.PodGroup != "" {
		tmpl.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(opts.PodGroup)}
	}
	addPorts(&tmpl.Spec, opts.Ports)
	excludeNodes(&tmpl.Spec, opts.ExcludedNodes)
	if opts.BarrierImage != "" {
		inPlaceShape(&tmpl.Spec, opts.BarrierImage, opts.Attempt, opts.BarrierInWorker)
		saveOnNotice(&tmpl.Spec, run.Spec.Checkpoint)
	}

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:            run.Name,
			Namespace:       run.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))},
			Finalizers:      []string{v1alpha1.FinalizerAttemptJob},
		},
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			Completions:          ptr.To(run.Spec.Workers),
			Parallelism:          ptr.To(run.Spec.Workers),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy:     PodFailurePolicy(run),
			Template:             tmpl,
		},
	}
	// Per-index limits in both scopes: a Gang's index fails at its first failure (0), and the
	// Job controller's Job-wide pod-failure backoff, which it keys by the Job's name and so
	// can hand on to the next attempt's Job of the same name, is never consulted.
	job.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		// Index scope's retries are the Job controller's per-index backoff: it creates and
		// replaces the pods.
		job.Spec.BackoffLimitPerIndex = ptr.To(ptr.Deref(run.Spec.BackoffLimitPerIndex, 0))
		job.Spec.MaxFailedIndexes = run.Spec.MaxFailedIndexes
	} else {
		// A gang's pods are faultline's to create (Pod): the Job controller's replacement of
		// a failed pod (10 s of backoff at least, on any node) is never what a gang needs,
		// and its creation rate (kube-controller-manager's QPS 20) is not the controller's.
		job.Spec.ManagedBy = ptr.To(v1alpha1.JobManagedBy)
	}
	if run.Spec.SuccessPolicy == v1alpha1.SuccessPolicyLeader {
		// Index 0 alone: a plugin whose layout has processes that never exit puts its
		// leader there (TensorFlow's chief before its parameter servers and workers).
		job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
	}
	// The Job is all Pod reads: the roles go with it (AnnotationRoleTemplates).
	SetRoleTemplates(job, run.Spec.Roles)
	return job
}

// Managed reports whether faultline creates job's pods (a Gang-scope attempt's Job), rather
// than the Job controller.
func Managed(job *batchv1.Job) bool {
	return job != nil && ptr.Deref(job.Spec.ManagedBy, "") == v1alpha1.JobManagedBy
}

// Pod is the pod of index i of a Job that faultline manages, as the Job controller would make
// it (its pkg/controller/job, v1.36): the template with the completion index as annotation
// and label, JOB_COMPLETION_INDEX in every container, the hostname <job>-<i> (the stable
// per-index address under the run's Service), and the Job as its controller. job is the Job
// as the API server returned it: its template then carries the selector's labels.
//
// The name is fixed by the Job and the index (PodName): a second creation of the same pod
// (the cache not showing the first yet, a crash between the creation and the status write)
// is refused by the API server, so a Job never gets two pods of one index from faultline.
//
// A pod made for a later attempt than the Job's (a moved index of an in-place restart) says
// so: its attempt label and FAULTLINE_ATTEMPT are that attempt's, and it keeps off the nodes
// the attempt excludes (the Job's template holds only its own attempt's).
//
// It carries the Job-tracking finalizer, as the Job controller's pods do, for the same
// reason: a worker that is deleted (an eviction, a preemption, a kubectl delete) stays until
// faultline has seen how it ended and judged its attempt; the controller drops the
// finalizer when it retires the pod, or when the run finishes. Without it, a worker that
// failed and went before a reconcile saw it would leave a hole that looks like a pod not yet
// made, and a new process would join the running gang unjudged (issue 38). The Job
// controller leaves the finalizer of a pod whose Job another controller manages alone.
func Pod(job *batchv1.Job, i int, o PodOptions) (*corev1.Pod, error) {
	roles, err := RoleTemplates(job)
	if err != nil {
		return nil, err
	}
	tmpl := job.Spec.Template.DeepCopy()
	index := strconv.Itoa(i)
	if o.Attempt > 0 {
		n := strconv.Itoa(int(o.Attempt))
		tmpl.Labels = merge(tmpl.Labels, map[string]string{v1alpha1.LabelAttempt: n})
		for _, cs := range [][]corev1.Container{tmpl.Spec.InitContainers, tmpl.Spec.Containers} {
			for j := range cs {
				for k := range cs[j].Env {
					if cs[j].Env[k].Name == v1alpha1.EnvAttempt {
						cs[j].Env[k].Value = n
					}
				}
			}
		}
	}
	if extra := slices.DeleteFunc(slices.Clone(o.ExcludedNodes), func(n string) bool { return excluded(&tmpl.Spec, n) }); len(extra) > 0 {
		excludeNodes(&tmpl.Spec, extra)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            PodName(job, i, o.Attempt),
			Namespace:       job.Namespace,
			Labels:          merge(tmpl.Labels, map[string]string{batchv1.JobCompletionIndexAnnotation: index}),
			Annotations:     merge(tmpl.Annotations, map[string]string{batchv1.JobCompletionIndexAnnotation: index}),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			Finalizers:      []string{batchv1.JobTrackingFinalizer},
		},
		Spec: tmpl.Spec,
	}
	if role, roleIndex, ok := roleOf(tmpl.Annotations[v1alpha1.AnnotationRoles], i); ok {
		// What the faultline-roles admission policy writes on the pods the Job controller
		// creates (an Index-scope run's), written here for the pods faultline creates: the
		// containers read them through the downward API (rendezvous.RoleEnv).
		pod.Labels[v1alpha1.LabelRole] = role
		pod.Labels[v1alpha1.LabelRoleIndex] = strconv.Itoa(roleIndex)
		if k := slices.IndexFunc(roles, func(t v1alpha1.RoleTemplate) bool { return t.Name == role }); k >= 0 {
			ApplyRole(&pod.Spec, &roles[k])
		}
	}
	pod.Spec.Hostname = job.Name + "-" + index
	env := corev1.EnvVar{Name: v1alpha1.EnvCompletionIndex, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.labels['" + batchv1.JobCompletionIndexAnnotation + "']",
	}}}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for j := range cs {
			if !slices.ContainsFunc(cs[j].Env, func(e corev1.EnvVar) bool { return e.Name == v1alpha1.EnvCompletionIndex }) {
				cs[j].Env = append(cs[j].Env, env)
			}
		}
	}
	return pod, nil
}

// RoleTemplates reads the run's spec.roles that job was made with (AnnotationRoleTemplates),
// with what the run's admission added to them (SetRoleTemplates).
func RoleTemplates(job *batchv1.Job) ([]v1alpha1.RoleTemplate, error) {
	raw, ok := job.Annotations[v1alpha1.AnnotationRoleTemplates]
	if !ok {
		return nil, nil
	}
	var roles []v1alpha1.RoleTemplate
	if err := json.Unmarshal([]byte(raw), &roles); err != nil {
		return nil, fmt.Errorf("job %s/%s: annotation %s is not the run's spec.roles: %w", job.Namespace, job.Name, v1alpha1.AnnotationRoleTemplates, err)
	}
	return roles, nil
}

// SetRoleTemplates writes the role templates a Job's pods are made with: the run's
// spec.roles, with the node labels and tolerations of the flavors Kueue admitted each role to.
func SetRoleTemplates(job *batchv1.Job, roles []v1alpha1.RoleTemplate) {
	if len(roles) == 0 {
		delete(job.Annotations, v1alpha1.AnnotationRoleTemplates)
		return
	}
	raw, err := json.Marshal(roles)
	if err != nil {
		panic(fmt.Sprintf("marshal role templates: %v", err)) // plain data: cannot fail
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[v1alpha1.AnnotationRoleTemplates] = string(raw)
}

// ApplyRole gives a pod of a role what spec.roles sets for it: its nodeSelector over the
// template's, its tolerations beside the template's, its containers' resources instead.
func ApplyRole(spec *corev1.PodSpec, t *v1alpha1.RoleTemplate) {
	if len(t.NodeSelector) > 0 {
		spec.NodeSelector = merge(spec.NodeSelector, t.NodeSelector)
	}
	spec.Tolerations = append(spec.Tolerations, t.Tolerations...)
	for _, rc := range t.Containers {
		for j := range spec.Containers {
			if spec.Containers[j].Name == rc.Name {
				spec.Containers[j].Resources = *rc.Resources.DeepCopy()
			}
		}
	}
}

// CheckRoles says what of run's spec.roles cannot apply to a run whose framework lays its
// workers out in roles (nil: none; the run's restart scope as settled): a role the layout
// does not have, a container the template does not have, or roles with no layout at all.
// The error names the field and the fix.
func CheckRoles(run *v1alpha1.TrainingRun, roles []string) error {
	if len(run.Spec.Roles) == 0 {
		return nil
	}
	if len(roles) == 0 {
		return fmt.Errorf("spec.roles: framework %q does not lay its workers out in roles, so no pod has a role to match: remove spec.roles", run.Spec.Framework)
	}
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		return fmt.Errorf("spec.roles apply to restartScope Gang (with Index the Job controller creates every pod from spec.template): remove spec.roles or use restartScope Gang")
	}
	for i, t := range run.Spec.Roles {
		if !slices.Contains(roles, t.Name) {
			return fmt.Errorf("spec.roles[%d].name: %q is not a role of this run's layout (framework %q has %s): use one of those names", i, t.Name, run.Spec.Framework, strings.Join(roles, ", "))
		}
		for j, c := range t.Containers {
			if !slices.ContainsFunc(run.Spec.Template.Spec.Containers, func(tc corev1.Container) bool { return tc.Name == c.Name }) {
				return fmt.Errorf("spec.roles[%d].containers[%d].name: %q is not a container of spec.template.spec.containers: name one of those", i, j, c.Name)
			}
		}
	}
	return nil
}

// roleOf reads a layout (the value of v1alpha1.AnnotationRoles: "name:first-last" per role,
// comma-separated, as framework.RoleRanges writes it) for index i: its role and its index
// within the role; ok is false for no layout, or an index outside every range.
func roleOf(layout string, i int) (role string, roleIndex int, ok bool) {
	if layout == "" {
		return "", 0, false
	}
	for _, r := range strings.Split(layout, ",") {
		name, span, found := strings.Cut(r, ":")
		lo, hi, dash := strings.Cut(span, "-")
		first, err1 := strconv.Atoi(lo)
		last, err2 := strconv.Atoi(hi)
		if !found || !dash || err1 != nil || err2 != nil {
			return "", 0, false
		}
		if first <= i && i <= last {
			return name, i - first, true
		}
	}
	return "", 0, false
}

// PodOptions are what a pod of a later attempt than its Job's differs in.
type PodOptions struct {
	// Attempt, when set, is the attempt the pod is made for.
	Attempt int32
	// ExcludedNodes are kept off, beside those of the Job's template.
	ExcludedNodes []string
}

// excluded reports whether spec keeps off node already: every term of its required node
// affinity (they are ORed) excludes it by name.
func excluded(spec *corev1.PodSpec, node string) bool {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	return len(terms) > 0 && !slices.ContainsFunc(terms, func(term corev1.NodeSelectorTerm) bool {
		return !slices.ContainsFunc(term.MatchFields, func(f corev1.NodeSelectorRequirement) bool {
			return f.Key == NodeNameField && f.Operator == corev1.NodeSelectorOpNotIn && slices.Contains(f.Values, node)
		})
	})
}

// PodName is the name of index i's pod of job made for attempt (0: the Job's own): the Job's
// name and the index, as the Job controller's generated names start, then the first
// characters of the Job's UID, so that the pods of two attempts' Jobs (same name) never
// share a name; a pod made for a later attempt than the Job's (an index moved by an in-place
// restart) ends with that attempt, so that it never waits for its predecessor's name.
func PodName(job *batchv1.Job, i int, attempt int32) string {
	uid := strings.ReplaceAll(string(job.UID), "-", "")
	name := job.Name + "-" + strconv.Itoa(i) + "-" + uid[:min(len(uid), podNameUIDChars)]
	if own, ok := Number(job); attempt > 0 && (!ok || attempt != own) {
		name += "-" + strconv.Itoa(int(attempt))
	}
	return name
}

// podNameUIDChars is how much of the Job's UID a pod name carries: 8 hex digits, one chance
// in four billion that two Jobs of one run's name collide (then the later one's creations
// wait, refused, until the earlier one's pods are gone: never two pods of one name).
const podNameUIDChars = 8

// StopConditions are the pod conditions that, when True, say that the infrastructure stops
// the pod: the node agent's InfrastructureFault and the control plane's DisruptionTarget.
var StopConditions = []corev1.PodConditionType{v1alpha1.PodConditionInfrastructureFault, corev1.DisruptionTarget}

// PodFailurePolicy is the Job's policy for the run's restart scope.
//
// Gang: a failure of any kind fails its index (FailIndex, with no retries per index), so
// that the Job controller never replaces a pod behind faultline's back; faultline then ends
// the attempt and decides whether a new one starts. Not FailJob: a failed Job makes the Job
// controller delete every other worker itself, one request each at kube-controller-manager's
// rate limit (QPS 20: 13 s for 256 workers), while faultline is deleting them faster. That
// sync holds the Job's key, which the next attempt's Job shares (same name, for stable
// addresses), so the next attempt's pods waited for it: 5-9 s more in 2 of 3 restarts of 256
// workers (bench/results/2026-11-23-s6-256-qps-default-split.md).
//
// Index: infrastructure failures are Ignored (the Job controller replaces the index without
// counting it); application exits fail the index when no per-index retries are allowed, and
// otherwise count against backoffLimitPerIndex.
func PodFailurePolicy(run *v1alpha1.TrainingRun) *batchv1.PodFailurePolicy {
	var infra []batchv1.PodFailurePolicyOnPodConditionsPattern
	for _, t := range StopConditions {
		infra = append(infra, batchv1.PodFailurePolicyOnPodConditionsPattern{Type: t, Status: corev1.ConditionTrue})
	}
	anyExit := &batchv1.PodFailurePolicyOnExitCodesRequirement{
		Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0},
	}
	var rules []batchv1.PodFailurePolicyRule
	if run.Spec.RestartScope == v1alpha1.RestartScopeIndex {
		for _, c := range infra {
			rules = append(rules, batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{c}})
		}
		if ptr.Deref(run.Spec.BackoffLimitPerIndex, 0) == 0 {
			rules = append(rules, batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: anyExit})
		}
		return &batchv1.PodFailurePolicy{Rules: rules}
	}
	for _, c := range infra {
		rules = append(rules, batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailIndex, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{c}})
	}
	rules = append(rules, batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: anyExit})
	return &batchv1.PodFailurePolicy{Rules: rules}
}

// addPorts declares the framework's ports on the first container (the worker): they are
// informational for Kubernetes, but they document the rendezvous and name it for tools.
func addPorts(spec *corev1.PodSpec, ports []corev1.ContainerPort) {
	if len(ports) == 0 || len(spec.Containers) == 0 {
		return
	}
	c := &spec.Containers[0]
	for _, p := range ports {
		if !slices.ContainsFunc(c.Ports, func(q corev1.ContainerPort) bool { return q.ContainerPort == p.ContainerPort }) {
			c.Ports = append(c.Ports, p)
		}
	}
}

// excludeNodes adds a required node affinity that keeps the pod off the given nodes, by the
// Node's name (metadata.name; a node's hostname label need not be its name). Terms of a
// required affinity are ORed, so the exclusion is added to every term the user wrote. A
// matchFields requirement may hold one value only (the API server refuses a NotIn of two
// nodes), so each node gets its own; the requirements of a term are ANDed.
func excludeNodes(spec *corev1.PodSpec, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	reqs := make([]corev1.NodeSelectorRequirement, 0, len(nodes))
	for _, n := range nodes {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: NodeNameField, Operator: corev1.NodeSelectorOpNotIn, Values: []string{n}})
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, reqs...)
	}
}

// NodeNameField is the one field a node selector's matchFields may name: the Node's name.
const NodeNameField = "metadata.name"

func merge(base, extra map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// ExcludedNodes are the nodes run's next attempt keeps off: those of faults, for the run's
// lifetime, and those of a maintenance not over yet.
func ExcludedNodes(run *v1alpha1.TrainingRun) []string {
	out := slices.Clone(run.Status.ExcludedNodes)
	for _, n := range run.Status.MaintenanceExcludedNodes {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
