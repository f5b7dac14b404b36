package e2e

import (
	"context"
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
