package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2ESubstrateIsTheRealJobController proves that the control plane under every other
// e2e test is the real Job controller, with the two behaviours faultline builds on: a pod
// failure carrying faultline's InfrastructureFault condition is Ignored (the index is
// replaced, nothing is counted), and an exit code NotIn [0] makes the Job fail through its
// podFailurePolicy.
func TestE2ESubstrateIsTheRealJobController(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			Completions:          ptr.To[int32](2),
			Parallelism:          ptr.To[int32](2),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					Action: batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{
						Type: v1alpha1.PodConditionInfrastructureFault, Status: corev1.ConditionTrue,
					}},
				},
				{
					Action: batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0},
					},
				},
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "smoke"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
				},
			},
		},
	}
	if _, err := c.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job: %v", err)
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "smoke"})
	running, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		return cluster.CountRunning(pods) == 2, nil
	})
	if err != nil {
		t.Fatalf("both indexes Running: %v", err)
	}
	byIndex := map[int]*corev1.Pod{}
	for _, p := range running {
		byIndex[attempt.IndexOrNone(p)] = p
	}

	// Index 0: the infrastructure fault is marked on the pod before it exits 143, as the node
	// agent does during a node shutdown.
	victim := byIndex[0]
	markInfrastructureFault(ctx, t, c, victim, v1alpha1.CauseNodeShutdown)
	if err := c.FailPod(ctx, ns, victim.Name, cluster.Failure{ExitCode: 143, Reason: "Error", Message: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.UID != victim.UID && p.Annotations[batchv1.JobCompletionIndexAnnotation] == "0" && cluster.PodRunning(p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("index 0 replaced after an ignored infrastructure fault: %v", err)
	}
	got, err := c.Client.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Failed != 0 {
		t.Fatalf("job counted %d failures; the Ignore rule should count none", got.Status.Failed)
	}
	if cond := jobCondition(got, batchv1.JobFailureTarget); cond != nil {
		t.Fatalf("job got FailureTarget after an ignored failure: %s", cond.Message)
	}

	// Index 1: an application exit fails the whole Job through the FailJob rule.
	if err := c.FailPod(ctx, ns, byIndex[1].Name, cluster.Failure{ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	failed, err := c.WaitJob(ctx, ns, job.Name, func(j *batchv1.Job) (bool, error) {
		return jobCondition(j, batchv1.JobFailureTarget) != nil, nil
	})
	if err != nil {
		t.Fatalf("job FailureTarget after exit 1: %v", err)
	}
	if cond := jobCondition(failed, batchv1.JobFailureTarget); cond.Reason != batchv1.JobReasonPodFailurePolicy {
		t.Fatalf("FailureTarget reason = %q (%s), want %q", cond.Reason, cond.Message, batchv1.JobReasonPodFailurePolicy)
	}
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range j.Status.Conditions {
		if c := &j.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// TestE2ESubstrateLeavesAManagedJobAlone proves what faultline's gang attempts build on
// (attempt.Managed): the real Job controller leaves a Job whose spec.managedBy is faultline's
// alone. It creates no pod for it, does not take the pods faultline creates for it (no
// tracking finalizer), replaces none that fails, and writes nothing in its status, while a
// Job beside it that it does manage, created after, gets its pod and its status.
func TestE2ESubstrateLeavesAManagedJobAlone(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: ns, UID: "00000000-0000-0000-0000-00000000a11e"},
		Spec: v1alpha1.TrainingRunSpec{Workers: 2, RestartScope: v1alpha1.RestartScopeGang, Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest"}}},
		}},
	}
	job := attempt.Job(run, attempt.Options{Attempt: 1})
	job.OwnerReferences, job.Finalizers = nil, nil // no TrainingRun object behind it here
	if !attempt.Managed(job) {
		t.Fatalf("a gang's Job is not managed by faultline: managedBy %v", job.Spec.ManagedBy)
	}
	job, err := c.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job managed by faultline: %v", err)
	}
	want, err := attempt.Pod(job, 0, attempt.PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create index 0's pod as faultline does: %v", err)
	}
	if _, err := c.WaitPods(ctx, ns, labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run.Name}), func(pods []*corev1.Pod) (bool, error) {
		return cluster.CountRunning(pods) == 1, nil
	}); err != nil {
		t.Fatalf("index 0 Running: %v", err)
	}
	if err := c.FailPod(ctx, ns, pod.Name, cluster.Failure{ExitCode: 1}); err != nil {
		t.Fatal(err)
	}

	// A Job the Job controller manages, made after: once its status shows its pod active,
	// the Job controller has been at work for a while after the managed Job's events.
	control := job.DeepCopy()
	control.ObjectMeta = metav1.ObjectMeta{Name: "control", Namespace: ns, Labels: map[string]string{"app": "control"}}
	control.Spec.ManagedBy, control.Spec.Selector = nil, nil
	control.Spec.Completions, control.Spec.Parallelism = ptr.To[int32](1), ptr.To[int32](1)
	control.Spec.Template.Labels = map[string]string{"app": "control"}
	if _, err := c.Client.BatchV1().Jobs(ns).Create(ctx, control, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the control Job: %v", err)
	}
	if _, err := c.WaitJob(ctx, ns, control.Name, func(j *batchv1.Job) (bool, error) { return ptr.Deref(j.Status.Ready, 0) == 1, nil }); err != nil {
		t.Fatalf("the control Job's pod ready: %v", err)
	}

	got, err := c.Client.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Active != 0 || got.Status.Failed != 0 || got.Status.Ready != nil || got.Status.StartTime != nil || len(got.Status.Conditions) != 0 {
		t.Errorf("the Job controller wrote the managed Job's status: %+v", got.Status)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].UID != pod.UID {
		t.Errorf("the managed Job has %d pods, want only the one faultline made: %s", len(pods.Items), podNames(pods.Items))
	}
	for _, p := range pods.Items {
		// faultline's own Job-tracking finalizer (attempt.Pod), still there: the Job
		// controller, which drops it from a pod it has counted, left the failed pod alone.
		if !slices.Equal(p.Finalizers, []string{batchv1.JobTrackingFinalizer}) {
			t.Errorf("pod %s has finalizers %v, want faultline's %s alone: the Job controller took it", p.Name, p.Finalizers, batchv1.JobTrackingFinalizer)
		}
	}
}

func podNames(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Name+"("+string(p.Status.Phase)+")")
	}
	return strings.Join(s, ", ")
}
