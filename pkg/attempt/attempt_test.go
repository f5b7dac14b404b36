package attempt

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func makeRun(mut ...func(*v1alpha1.TrainingRun)) *v1alpha1.TrainingRun {
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-1"},
		Spec: v1alpha1.TrainingRunSpec{
			Workers:      4,
			RestartScope: v1alpha1.RestartScopeGang,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "worker", Image: "trainer", Env: []corev1.EnvVar{{Name: "USER_VAR", Value: "x"}},
				}}},
			},
		},
	}
	for _, m := range mut {
		m(run)
	}
	return run
}

func TestJobGang(t *testing.T) {
	run := makeRun()
	job := Job(run, Options{Attempt: 3, Env: []corev1.EnvVar{{Name: "PLUGIN", Value: "$(FAULTLINE_INDEX)"}}, Traceparent: "00-abc-def-01"})

	wantLabels := map[string]string{v1alpha1.LabelRun: "llm", v1alpha1.LabelRunUID: "uid-1", v1alpha1.LabelAttempt: "3"}
	if diff := cmp.Diff(wantLabels, job.Labels); diff != "" {
		t.Errorf("job labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{v1alpha1.FinalizerAttemptJob}, job.Finalizers); diff != "" {
		t.Errorf("job finalizers (-want +got): the Job must stay until faultline has seen the Job controller done with it\n%s", diff)
	}
	if job.Name != "llm" || job.Namespace != "ml" {
		t.Errorf("job is %s/%s, want ml/llm: the name must stay the run's across attempts", job.Namespace, job.Name)
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.UID != "uid-1" || ref.Kind != v1alpha1.KindTrainingRun {
		t.Errorf("controller ref = %+v, want the run", ref)
	}
	s := job.Spec
	if *s.CompletionMode != batchv1.IndexedCompletion || *s.Completions != 4 || *s.Parallelism != 4 {
		t.Errorf("mode %v completions %d parallelism %d, want Indexed 4 4", *s.CompletionMode, *s.Completions, *s.Parallelism)
	}
	if *s.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("podReplacementPolicy = %v, want Failed", *s.PodReplacementPolicy)
	}
	if s.BackoffLimit != nil || ptr.Deref(s.BackoffLimitPerIndex, -1) != 0 || s.MaxFailedIndexes != nil {
		t.Errorf("gang scope: backoffLimit %v perIndex %v maxFailed %v, want unset, 0 and unset", s.BackoffLimit, s.BackoffLimitPerIndex, s.MaxFailedIndexes)
	}
	tmpl := s.Template
	if tmpl.Labels["team"] != "a" || tmpl.Labels[v1alpha1.LabelAttempt] != "3" || tmpl.Labels[v1alpha1.LabelRun] != "llm" || tmpl.Labels[v1alpha1.LabelRunUID] != "uid-1" {
		t.Errorf("pod labels = %v: want the user's plus run and attempt", tmpl.Labels)
	}
	if tmpl.Annotations[v1alpha1.AnnotationTraceparent] != "00-abc-def-01" {
		t.Errorf("traceparent not copied onto the pods: %v", tmpl.Annotations)
	}
	if tmpl.Spec.RestartPolicy != corev1.RestartPolicyNever || tmpl.Spec.Subdomain != "llm" {
		t.Errorf("restartPolicy %q subdomain %q, want Never and llm", tmpl.Spec.RestartPolicy, tmpl.Spec.Subdomain)
	}
	var names []string
	for _, e := range tmpl.Spec.Containers[0].Env {
		names = append(names, e.Name)
	}
	want := []string{v1alpha1.EnvIndex, v1alpha1.EnvRun, v1alpha1.EnvAttempt, v1alpha1.EnvWorldSize, v1alpha1.EnvService, "PLUGIN", "USER_VAR"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("env order (-want +got): FAULTLINE_INDEX must come first for $(VAR) expansion, the user's last\n%s", diff)
	}
	if got := tmpl.Spec.Containers[0].TerminationMessagePolicy; got != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("terminationMessagePolicy = %q, want FallbackToLogsOnError: the frameworks print their errors, hints read them", got)
	}
	if run.Spec.Template.Labels[v1alpha1.LabelRun] != "" || len(run.Spec.Template.Spec.Containers[0].Env) != 1 {
		t.Error("Job() modified the run's template")
	}
}

// TestJobKeepsTheUsersGates: the user's scheduling gates go onto the workers as they are.
func TestJobKeepsTheUsersGates(t *testing.T) {
	run := makeRun()
	run.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}}
	got := Job(run, Options{Attempt: 2}).Spec.Template.Spec.SchedulingGates
	if diff := cmp.Diff([]corev1.PodSchedulingGate{{Name: "example.com/quota"}}, got); diff != "" {
		t.Errorf("gates (-want +got):\n%s", diff)
	}
}

func TestPodFailurePolicy(t *testing.T) {
	infraCond := batchv1.PodFailurePolicyOnPodConditionsPattern{Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue}
	disruption := batchv1.PodFailurePolicyOnPodConditionsPattern{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}
	anyExit := &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}
	cases := map[string]struct {
		run  *v1alpha1.TrainingRun
		want []batchv1.PodFailurePolicyRule
	}{
		"gang ends the attempt at any failure": {
			run: makeRun(),
			want: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{infraCond}},
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{disruption}},
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: anyExit},
			},
		},
		"index ignores infrastructure and fails the index on an exit": {
			run: makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.RestartScope = v1alpha1.RestartScopeIndex }),
			want: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{infraCond}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{disruption}},
				{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: anyExit},
			},
		},
		"index with retries counts exits against backoffLimitPerIndex": {
			run: makeRun(func(r *v1alpha1.TrainingRun) {
				r.Spec.RestartScope = v1alpha1.RestartScopeIndex
				r.Spec.BackoffLimitPerIndex = ptr.To[int32](2)
			}),
			want: []batchv1.PodFailurePolicyRule{
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{infraCond}},
				{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{disruption}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PodFailurePolicy(tc.run).Rules); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobIndexScopeAndLeader(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.RestartScope = v1alpha1.RestartScopeIndex
		r.Spec.MaxFailedIndexes = ptr.To[int32](1)
		r.Spec.SuccessPolicy = v1alpha1.SuccessPolicyLeader
	})
	s := Job(run, Options{Attempt: 1}).Spec
	if s.BackoffLimit != nil || ptr.Deref(s.BackoffLimitPerIndex, -1) != 0 || ptr.Deref(s.MaxFailedIndexes, -1) != 1 {
		t.Errorf("index scope: backoffLimit %v perIndex %v maxFailed %v", s.BackoffLimit, s.BackoffLimitPerIndex, s.MaxFailedIndexes)
	}
	want := &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
	if diff := cmp.Diff(want, s.SuccessPolicy); diff != "" {
		t.Errorf("leader success policy (-want +got):\n%s", diff)
	}
}

func TestExcludeNodes(t *testing.T) {
	// By the Node's name, not its hostname label (which need not be its name); one node per
	// requirement, as the API server allows no more in matchFields.
	notIn1 := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"bad-1"}}
	notIn2 := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"bad-2"}}
	zone := corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	gpu := corev1.NodeSelectorRequirement{Key: "gpu", Operator: corev1.NodeSelectorOpExists}
	cases := map[string]struct {
		affinity *corev1.Affinity
		want     []corev1.NodeSelectorTerm
	}{
		"no affinity gets one term": {
			want: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{notIn1, notIn2}}},
		},
		"every user term gets the exclusion (terms are ORed)": {
			affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}, {MatchExpressions: []corev1.NodeSelectorRequirement{gpu}}},
			}}},
			want: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{zone}, MatchFields: []corev1.NodeSelectorRequirement{notIn1, notIn2}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{gpu}, MatchFields: []corev1.NodeSelectorRequirement{notIn1, notIn2}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.Template.Spec.Affinity = tc.affinity })
			job := Job(run, Options{Attempt: 2, ExcludedNodes: []string{"bad-1", "bad-2"}})
			got := job.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("terms (-want +got):\n%s", diff)
			}
			if tc.affinity != nil && len(run.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields) != 0 {
				t.Error("Job() modified the run's affinity")
			}
		})
	}
}

func TestNumber(t *testing.T) {
	cases := map[string]struct {
		label string
		want  int32
		ok    bool
	}{
		"valid": {"7", 7, true}, "zero": {"0", 0, false}, "garbled": {"x", 0, false}, "missing": {"", 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{Labels: map[string]string{}}
			if tc.label != "" {
				obj.Labels[v1alpha1.LabelAttempt] = tc.label
			}
			n, ok := Number(obj)
			if n != tc.want || ok != tc.ok {
				t.Errorf("Number(%q) = %d, %v; want %d, %v", tc.label, n, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestIndex(t *testing.T) {
	cases := map[string]struct {
		annotations, labels map[string]string
		want                int
		ok                  bool
	}{
		"annotation":       {map[string]string{batchv1.JobCompletionIndexAnnotation: "3"}, nil, 3, true},
		"label":            {nil, map[string]string{batchv1.JobCompletionIndexAnnotation: "4"}, 4, true},
		"annotation first": {map[string]string{batchv1.JobCompletionIndexAnnotation: "5"}, map[string]string{batchv1.JobCompletionIndexAnnotation: "6"}, 5, true},
		"garbled":          {map[string]string{batchv1.JobCompletionIndexAnnotation: "x"}, nil, 0, false},
		"negative":         {map[string]string{batchv1.JobCompletionIndexAnnotation: "-1"}, nil, 0, false},
		"missing":          {nil, nil, 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &metav1.ObjectMeta{Annotations: tc.annotations, Labels: tc.labels}
			i, ok := Index(pod)
			if i != tc.want || ok != tc.ok {
				t.Errorf("Index = %d, %v; want %d, %v", i, ok, tc.want, tc.ok)
			}
			want := NoIndex
			if tc.ok {
				want = tc.want
			}
			if got := IndexOrNone(pod); got != want {
				t.Errorf("IndexOrNone = %d, want %d", got, want)
			}
		})
	}
}

func TestPorts(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "user", ContainerPort: 1234}}
		r.Spec.Template.Spec.Containers = append(r.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar"})
	})
	job := Job(run, Options{Attempt: 1, Ports: []corev1.ContainerPort{{Name: "jax", ContainerPort: 1234}, {Name: "grpc", ContainerPort: 2222}}})
	want := []corev1.ContainerPort{{Name: "user", ContainerPort: 1234}, {Name: "grpc", ContainerPort: 2222}}
	if diff := cmp.Diff(want, job.Spec.Template.Spec.Containers[0].Ports); diff != "" {
		t.Errorf("worker ports (-want +got): the user's declaration of a port wins\n%s", diff)
	}
	if len(job.Spec.Template.Spec.Containers[1].Ports) != 0 || len(run.Spec.Template.Spec.Containers[0].Ports) != 1 {
		t.Error("ports went to the sidecar, or the run's template was modified")
	}
}

// TestTerminationMessagePolicyKeepsTheUsersChoice: a worker container whose policy the user
// set keeps it; only an unset one falls back to the logs.
func TestTerminationMessagePolicyKeepsTheUsersChoice(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageReadFile
		r.Spec.Template.Spec.Containers = append(r.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: "s"})
	})
	cs := Job(run, Options{Attempt: 1}).Spec.Template.Spec.Containers
	if cs[0].TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("worker's policy = %q, want the user's File", cs[0].TerminationMessagePolicy)
	}
	if cs[1].TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("sidecar's policy = %q, want FallbackToLogsOnError", cs[1].TerminationMessagePolicy)
	}
}

// TestOfRun: a pod is the run's by its run-uid label; a pod of an earlier run of the same name
// is not, and a pod made before the label existed counts by its age against the run's.
func TestOfRun(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	run := makeRun(func(r *v1alpha1.TrainingRun) { r.CreationTimestamp = created })
	pod := func(labels map[string]string, at time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, CreationTimestamp: metav1.NewTime(at)}}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"its UID":                           {pod(map[string]string{v1alpha1.LabelRunUID: "uid-1"}, created.Add(time.Second)), true},
		"an earlier run's UID":              {pod(map[string]string{v1alpha1.LabelRunUID: "uid-0"}, created.Add(time.Second)), false},
		"no UID label, made after the run":  {pod(nil, created.Add(time.Second)), true},
		"no UID label, made before the run": {pod(nil, created.Add(-time.Second)), false},
		"no UID label, made with the run":   {pod(nil, created.Time), true},
	} {
		if got := OfRun(tc.pod, run); got != tc.want {
			t.Errorf("%s: OfRun = %v, want %v", name, got, tc.want)
		}
	}
}

// TestManagedGangOnly: a gang's Job is faultline's to fill; an Index-scope run keeps the Job
// controller, whose per-index retries are its restarts.
func TestManagedGangOnly(t *testing.T) {
	if job := Job(makeRun(), Options{Attempt: 1}); !Managed(job) || ptr.Deref(job.Spec.ManagedBy, "") != v1alpha1.JobManagedBy {
		t.Errorf("gang: managedBy %v, want %s", job.Spec.ManagedBy, v1alpha1.JobManagedBy)
	}
	if job := Job(makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.RestartScope = v1alpha1.RestartScopeIndex }), Options{Attempt: 1}); Managed(job) || job.Spec.ManagedBy != nil {
		t.Errorf("index scope: managedBy %v, want unset (the Job controller's)", job.Spec.ManagedBy)
	}
	if Managed(nil) {
		t.Error("Managed(nil) = true")
	}
}

// TestPod: index i's pod of a managed Job is what the Job controller would make of the
// template (v1.36's pkg/controller/job: completion index annotation and label, hostname,
// JOB_COMPLETION_INDEX, the Job as controller), named by the Job's UID and the index.
func TestPod(t *testing.T) {
	job := Job(makeRun(), Options{Attempt: 2})
	job.UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	// What the API server adds to a Job with a generated selector.
	job.Spec.Template.Labels[batchv1.ControllerUidLabel] = string(job.UID)
	job.Spec.Template.Labels[batchv1.JobNameLabel] = job.Name
	job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}

	p := mustPod(t, job, 3, PodOptions{})
	if p.Name != "llm-3-0f1e2d3c" || p.Namespace != "ml" {
		t.Errorf("pod %s/%s, want ml/llm-3-0f1e2d3c", p.Namespace, p.Name)
	}
	if p.Spec.Hostname != "llm-3" || p.Spec.Subdomain != "llm" {
		t.Errorf("hostname %q subdomain %q, want llm-3 and llm: the index's stable address", p.Spec.Hostname, p.Spec.Subdomain)
	}
	if p.Labels[batchv1.JobCompletionIndexAnnotation] != "3" || p.Annotations[batchv1.JobCompletionIndexAnnotation] != "3" {
		t.Errorf("completion index label %q annotation %q, want 3", p.Labels[batchv1.JobCompletionIndexAnnotation], p.Annotations[batchv1.JobCompletionIndexAnnotation])
	}
	if i, ok := Index(p); !ok || i != 3 {
		t.Errorf("Index = %d, %v", i, ok)
	}
	if p.Labels[batchv1.ControllerUidLabel] != string(job.UID) || p.Labels[v1alpha1.LabelAttempt] != "2" || p.Labels["team"] != "a" {
		t.Errorf("labels %v: want the template's (the Job's selector, the attempt, the user's)", p.Labels)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != job.UID || ref.Kind != "Job" || ref.APIVersion != "batch/v1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller ref %+v, want the Job", ref)
	}
	if !slices.Equal(p.Finalizers, []string{batchv1.JobTrackingFinalizer}) {
		t.Errorf("finalizers %v, want the Job-tracking finalizer: a deleted worker stays until judged", p.Finalizers)
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		last := c.Env[len(c.Env)-1]
		if last.Name != "JOB_COMPLETION_INDEX" || last.ValueFrom == nil || last.ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/job-completion-index']" {
			t.Errorf("container %s: last env %+v, want JOB_COMPLETION_INDEX from the index label", c.Name, last)
		}
	}
	if _, ok := job.Spec.Template.Labels[batchv1.JobCompletionIndexAnnotation]; ok || len(job.Spec.Template.Spec.Containers[0].Env) != len(p.Spec.Containers[0].Env)-1 {
		t.Error("Pod() modified the Job's template")
	}
	// Another attempt's Job of the same name: other pod names.
	next := job.DeepCopy()
	next.UID = "9a8b7c6d-0000-0000-0000-000000000000"
	if a, b := PodName(job, 3, 0), PodName(next, 3, 0); a == b {
		t.Errorf("two Jobs' pods of index 3 are both named %s", a)
	}
}

// TestInPlaceShape: with a barrier image, every worker container restarts the whole pod on a
// non-zero exit, the barrier is the last init container and shares the run volume, and every
// container is told where the attempt file is.
func TestInPlaceShape(t *testing.T) {
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "fetch", Image: "data"}}
	})
	if InPlaceShape(Job(run, Options{Attempt: 1})) {
		t.Fatal("a Job without a barrier image restarts in place")
	}
	job := Job(run, Options{Attempt: 1, BarrierImage: "ghcr.io/faultline-dev/faultline-barrier:v1.0.0"})
	if !InPlaceShape(job) {
		t.Fatal("InPlaceShape = false with a barrier image")
	}
	spec := job.Spec.Template.Spec
	if n := len(spec.InitContainers); n != 2 || spec.InitContainers[0].Name != "fetch" || spec.InitContainers[1].Name != v1alpha1.BarrierContainer {
		t.Fatalf("init containers %v: want the user's, then the barrier", spec.InitContainers)
	}
	b := spec.InitContainers[1]
	if b.Image != "ghcr.io/faultline-dev/faultline-barrier:v1.0.0" || len(b.VolumeMounts) != 1 || b.VolumeMounts[0].MountPath != v1alpha1.RunDir || b.VolumeMounts[0].ReadOnly {
		t.Errorf("barrier %+v: want the image, the run volume writable at %s", b, v1alpha1.RunDir)
	}
	if b.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("barrier terminationMessagePolicy %q: its message (attempt=N) must be the file's", b.TerminationMessagePolicy)
	}
	w := spec.Containers[0]
	want := []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0}},
	}}
	if diff := cmp.Diff(want, w.RestartPolicyRules); diff != "" || ptr.Deref(w.RestartPolicy, "") != corev1.ContainerRestartPolicyNever {
		t.Errorf("worker restartPolicy %v rules (-want +got):\n%s", w.RestartPolicy, diff)
	}
	if len(w.VolumeMounts) != 1 || !w.VolumeMounts[0].ReadOnly || w.VolumeMounts[0].Name != v1alpha1.RunVolume {
		t.Errorf("worker mounts %v: want the run volume read-only", w.VolumeMounts)
	}
	for _, c := range append(spec.InitContainers[:1], w) {
		if c.Env[len(c.Env)-1] != (corev1.EnvVar{Name: v1alpha1.EnvAttemptFile, Value: v1alpha1.AttemptFile}) {
			t.Errorf("container %s: last env %v, want %s", c.Name, c.Env[len(c.Env)-1], v1alpha1.EnvAttemptFile)
		}
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].EmptyDir == nil || spec.Volumes[0].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("volumes %v: want the in-memory run volume", spec.Volumes)
	}
	if len(run.Spec.Template.Spec.InitContainers) != 1 || run.Spec.Template.Spec.Containers[0].RestartPolicyRules != nil {
		t.Error("Job() modified the run's template")
	}
}

// TestPodOfALaterAttempt: a moved index's pod says its attempt and keeps off the attempt's
// excluded nodes, and its name never meets its predecessor's.
func TestPodOfALaterAttempt(t *testing.T) {
	job := Job(makeRun(), Options{Attempt: 2, ExcludedNodes: []string{"old"}})
	job.UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	p := mustPod(t, job, 1, PodOptions{Attempt: 4, ExcludedNodes: []string{"old", "faulty"}})
	if p.Name != "llm-1-0f1e2d3c-4" || p.Labels[v1alpha1.LabelAttempt] != "4" || p.Spec.Hostname != "llm-1" {
		t.Errorf("pod %s attempt label %s hostname %s: want llm-1-0f1e2d3c-4, 4, llm-1", p.Name, p.Labels[v1alpha1.LabelAttempt], p.Spec.Hostname)
	}
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == v1alpha1.EnvAttempt && e.Value != "4" {
			t.Errorf("%s = %s, want 4", e.Name, e.Value)
		}
	}
	fields := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields
	var off []string
	for _, f := range fields {
		off = append(off, f.Values...)
	}
	if diff := cmp.Diff([]string{"old", "faulty"}, off); diff != "" {
		t.Errorf("nodes kept off (-want +got), each once:\n%s", diff)
	}
	if own := mustPod(t, job, 1, PodOptions{Attempt: 2}); own.Name != "llm-1-0f1e2d3c" {
		t.Errorf("the Job's own attempt: pod %s, want llm-1-0f1e2d3c", own.Name)
	}
}

// TestPodRoles: the pods faultline creates carry their role and index within it, as the
// faultline-roles admission policy labels the Job controller's.
func TestPodRoles(t *testing.T) {
	job := Job(makeRun(func(r *v1alpha1.TrainingRun) { r.Spec.Workers = 5 }), Options{Attempt: 1, RoleRanges: "chief:0-0,ps:1-2,worker:3-4"})
	job.UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	for i, want := range []struct {
		role  string
		index string
	}{{"chief", "0"}, {"ps", "0"}, {"ps", "1"}, {"worker", "0"}, {"worker", "1"}} {
		p := mustPod(t, job, i, PodOptions{})
		if p.Labels[v1alpha1.LabelRole] != want.role || p.Labels[v1alpha1.LabelRoleIndex] != want.index {
			t.Errorf("index %d: role %q role-index %q, want %s %s", i, p.Labels[v1alpha1.LabelRole], p.Labels[v1alpha1.LabelRoleIndex], want.role, want.index)
		}
	}
	if _, ok := mustPod(t, Job(makeRun(), Options{Attempt: 1}), 0, PodOptions{}).Labels[v1alpha1.LabelRole]; ok {
		t.Error("a run without roles got a role label")
	}
	for _, bad := range []string{"chief", "chief:0", "chief:a-b", "ps:1-2"} {
		if _, _, ok := roleOf(bad, 0); ok {
			t.Errorf("roleOf(%q, 0) found a role", bad)
		}
	}
}

// TestRunning: a pod restarted in place runs the attempt its barrier last opened for.
func TestRunning(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelAttempt: "2"}}}
	if n, ok := Running(pod); !ok || n != 2 {
		t.Errorf("no barrier: %d %v, want 2", n, ok)
	}
	barrierSays := func(msg string, code int32) {
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: v1alpha1.BarrierContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}}}}
	}
	barrierSays("attempt=4", 0)
	if n, _ := Running(pod); n != 4 {
		t.Errorf("barrier opened for 4: %d", n)
	}
	barrierSays("attempt=1", 0) // opened before a later attempt's Job: the label wins
	if n, _ := Running(pod); n != 2 {
		t.Errorf("barrier message older than the label: %d, want 2", n)
	}
	pod.Status.InitContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if n, _ := Running(pod); n != 2 {
		t.Errorf("barrier waiting: %d, want the label's 2", n)
	}
	if _, ok := Running(&corev1.Pod{}); ok {
		t.Error("a pod without an attempt label has an attempt")
	}
}

// TestJobAttempt: an attempt runs in its own Job unless its record says it restarted in
// place in an earlier attempt's.
func TestJobAttempt(t *testing.T) {
	run := makeRun()
	run.Status.Attempt = 3
	if Record(run) != nil || JobAttempt(run) != 3 {
		t.Errorf("no record: Record %v JobAttempt %d, want nil and 3", Record(run), JobAttempt(run))
	}
	run.Status.Attempts = []v1alpha1.AttemptRecord{{Attempt: 2}, {Attempt: 3, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: 1}}
	if r := Record(run); r == nil || r.Attempt != 3 || JobAttempt(run) != 1 {
		t.Errorf("in place in attempt 1's Job: Record %v JobAttempt %d, want attempt 3's and 1", r, JobAttempt(run))
	}
	run.Status.Attempts[1].JobAttempt = 0
	if JobAttempt(run) != 3 {
		t.Errorf("recreated: JobAttempt %d, want 3", JobAttempt(run))
	}
}

func mustPod(t *testing.T, job *batchv1.Job, i int, o PodOptions) *corev1.Pod {
	t.Helper()
	p, err := Pod(job, i, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodRoleTemplates: a role's pods get what spec.roles sets for it (resources of the named
// container, nodeSelector over the template's, tolerations beside them), other roles' pods get
// the template; the Job carries the roles, so later pods of the attempt keep them whatever the
// run's spec says by then.
func TestPodRoleTemplates(t *testing.T) {
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	run := makeRun(func(r *v1alpha1.TrainingRun) {
		r.Spec.Workers = 4
		r.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "gpu", "zone": "a"}
		r.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		r.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: gpu, Limits: gpu}
		r.Spec.Roles = []v1alpha1.RoleTemplate{{
			Name:         "ps",
			NodeSelector: map[string]string{"pool": "cpu"},
			Tolerations:  []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists}},
			Containers:   []v1alpha1.RoleContainer{{Name: r.Spec.Template.Spec.Containers[0].Name, Resources: corev1.ResourceRequirements{Requests: cpu}}},
		}}
	})
	job := Job(run, Options{Attempt: 1, RoleRanges: "chief:0-0,ps:1-2,worker:3-3"})
	job.UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	run.Spec.Roles = nil // the run changes; the attempt's pods do not
	for i, ps := range []bool{false, true, true, false} {
		p := mustPod(t, job, i, PodOptions{})
		wantSel := map[string]string{"pool": "gpu", "zone": "a"}
		wantTol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		wantRes := corev1.ResourceRequirements{Requests: gpu, Limits: gpu}
		if ps {
			wantSel = map[string]string{"pool": "cpu", "zone": "a"}
			wantTol = append(wantTol, corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpExists})
			wantRes = corev1.ResourceRequirements{Requests: cpu}
		}
		if diff := cmp.Diff(wantSel, p.Spec.NodeSelector); diff != "" {
			t.Errorf("index %d nodeSelector (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(wantTol, p.Spec.Tolerations); diff != "" {
			t.Errorf("index %d tolerations (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(wantRes, p.Spec.Containers[0].Resources); diff != "" {
			t.Errorf("index %d resources (-want +got):\n%s", i, diff)
		}
	}
	if diff := cmp.Diff(map[string]string{"pool": "gpu", "zone": "a"}, job.Spec.Template.Spec.NodeSelector); diff != "" {
		t.Errorf("a pod changed the Job's template (-want +got):\n%s", diff)
	}
	job.Annotations[v1alpha1.AnnotationRoleTemplates] = "{"
	if _, err := Pod(job, 1, PodOptions{}); err == nil || !strings.Contains(err.Error(), v1alpha1.AnnotationRoleTemplates) {
		t.Errorf("a garbled %s: error %v, want one that names it", v1alpha1.AnnotationRoleTemplates, err)
	}
}

// TestCheckRoles: what of spec.roles cannot apply is refused with the field and the fix.
func TestCheckRoles(t *testing.T) {
	layout := []string{"chief", "ps", "worker"}
	for name, tc := range map[string]struct {
		roles   []v1alpha1.RoleTemplate
		layout  []string
		scope   v1alpha1.RestartScope
		wantErr string
	}{
		"no roles":             {layout: layout},
		"known role":           {roles: []v1alpha1.RoleTemplate{{Name: "ps", Containers: []v1alpha1.RoleContainer{{Name: "trainer"}}}}, layout: layout},
		"unknown role":         {roles: []v1alpha1.RoleTemplate{{Name: "ps"}, {Name: "evaluatr"}}, layout: layout, wantErr: `spec.roles[1].name: "evaluatr" is not a role of this run's layout (framework "tensorflow" has chief, ps, worker)`},
		"unknown container":    {roles: []v1alpha1.RoleTemplate{{Name: "ps", Containers: []v1alpha1.RoleContainer{{Name: "sidecar"}}}}, layout: layout, wantErr: `spec.roles[0].containers[0].name: "sidecar" is not a container of spec.template.spec.containers`},
		"framework with none":  {roles: []v1alpha1.RoleTemplate{{Name: "ps"}}, wantErr: `spec.roles: framework "tensorflow" does not lay its workers out in roles`},
		"index scope, settled": {roles: []v1alpha1.RoleTemplate{{Name: "ps"}}, layout: layout, scope: v1alpha1.RestartScopeIndex, wantErr: "spec.roles apply to restartScope Gang"},
	} {
		t.Run(name, func(t *testing.T) {
			run := makeRun(func(r *v1alpha1.TrainingRun) {
				r.Spec.Framework = "tensorflow"
				r.Spec.RestartScope = tc.scope
				r.Spec.Template.Spec.Containers[0].Name = "trainer"
				r.Spec.Roles = tc.roles
			})
			err := CheckRoles(run, tc.layout)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckRoles: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckRoles: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A run with a progress deadline gives it to its workers, for the node agent that watches
// them; a run without one gives none, and Index scope has none.
func TestJobCarriesTheProgressDeadline(t *testing.T) {
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", UID: "uid-1"},
		Spec:       v1alpha1.TrainingRunSpec{Workers: 2, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w"}}}}},
	}
	if _, ok := Job(run, Options{Attempt: 1}).Spec.Template.Annotations[v1alpha1.AnnotationProgressDeadline]; ok {
		t.Error("a run without a progress deadline: its pods carry one")
	}
	run.Spec.FailurePolicy.ProgressDeadlineSeconds = ptr.To[int32](600)
	job := Job(run, Options{Attempt: 1})
	if got := job.Spec.Template.Annotations[v1alpha1.AnnotationProgressDeadline]; got != "600" {
		t.Errorf("the Job's template says %s=%q, want 600", v1alpha1.AnnotationProgressDeadline, got)
	}
	job.Spec.ManagedBy = ptr.To(v1alpha1.JobManagedBy)
	if p, err := Pod(job, 1, PodOptions{}); err != nil || p.Annotations[v1alpha1.AnnotationProgressDeadline] != "600" {
		t.Errorf("the pod made from it: %v, annotations %v", err, p.Annotations)
	}
	run.Spec.RestartScope = v1alpha1.RestartScopeIndex
	if _, ok := Job(run, Options{Attempt: 1}).Spec.Template.Annotations[v1alpha1.AnnotationProgressDeadline]; ok {
		t.Error("an Index-scope run's pods carry a progress deadline")
	}
}
