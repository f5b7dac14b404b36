package cluster_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// workerTemplate is a training worker that asks for one GPU; kwok runs it until failed.
func workerTemplate() corev1.PodTemplateSpec {
	gpu := corev1.ResourceList{corev1.ResourceName(v1alpha1.ResourceGPU): resource.MustParse("1")}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "worker", Image: "trainer:latest",
			Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
		}},
	}}
}

// TestNewJobSet checks the rendering that benchmarks rely on, without a cluster.
func TestNewJobSet(t *testing.T) {
	js := cluster.NewJobSet(cluster.JobSetSpec{
		Name: "train", Namespace: "ns", Workers: 4, PodTemplate: workerTemplate(), MaxRestarts: 3,
		FailJobSetOnPodFailurePolicy: true, FailJobOnExitCodes: []int32{42, 43},
	})
	// Unstructured objects hold only JSON types (int64, not int): DeepCopy panics otherwise.
	js = js.DeepCopy()
	if got := js.GroupVersionKind(); got.GroupVersion() != cluster.JobSetGVR.GroupVersion() || got.Kind != "JobSet" {
		t.Errorf("GVK %v", got)
	}
	if js.GetName() != "train" || js.GetNamespace() != "ns" {
		t.Errorf("name %s/%s", js.GetNamespace(), js.GetName())
	}
	rjobs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	if len(rjobs) != 1 {
		t.Fatalf("%d replicatedJobs, want 1", len(rjobs))
	}
	rjob := rjobs[0].(map[string]any)
	job, _, _ := unstructured.NestedMap(rjob, "template", "spec")
	for field, want := range map[string]any{
		"completionMode": "Indexed", "parallelism": int64(4), "completions": int64(4), "backoffLimit": int64(0),
	} {
		if job[field] != want {
			t.Errorf("Job spec %s = %v, want %v", field, job[field], want)
		}
	}
	if rp, _, _ := unstructured.NestedString(job, "template", "spec", "restartPolicy"); rp != "Never" {
		t.Errorf("restartPolicy %q, want Never (JobSet's webhook would default OnFailure)", rp)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(job, "template", "metadata", "creationTimestamp"); found {
		t.Error("template carries a null creationTimestamp")
	}
	rules, _, _ := unstructured.NestedSlice(job, "podFailurePolicy", "rules")
	if len(rules) != 1 {
		t.Fatalf("podFailurePolicy rules %v, want one", rules)
	}
	rule := rules[0].(map[string]any)
	codes, _, _ := unstructured.NestedSlice(rule, "onExitCodes", "values")
	if rule["action"] != "FailJob" || len(codes) != 2 || codes[0] != int64(42) || codes[1] != int64(43) {
		t.Errorf("podFailurePolicy rule %v", rule)
	}
	if n, _, _ := unstructured.NestedInt64(js.Object, "spec", "failurePolicy", "maxRestarts"); n != 3 {
		t.Errorf("maxRestarts %d, want 3", n)
	}
	frules, _, _ := unstructured.NestedSlice(js.Object, "spec", "failurePolicy", "rules")
	if len(frules) != 1 || frules[0].(map[string]any)["action"] != "FailJobSet" {
		t.Errorf("failurePolicy rules %v, want one FailJobSet rule", frules)
	}
	if _, err := json.Marshal(js.Object); err != nil {
		t.Error(err)
	}

	// Without the options: no rules at all, and a caller's restartPolicy is kept.
	tmpl := workerTemplate()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	plain := cluster.NewJobSet(cluster.JobSetSpec{Name: "p", Namespace: "ns", Workers: 1, PodTemplate: tmpl})
	if _, found, _ := unstructured.NestedFieldNoCopy(plain.Object, "spec", "failurePolicy", "rules"); found {
		t.Error("failurePolicy rules without FailJobSetOnPodFailurePolicy")
	}
	pj := plain.Object["spec"].(map[string]any)["replicatedJobs"].([]any)[0].(map[string]any)
	if _, found, _ := unstructured.NestedFieldNoCopy(pj, "template", "spec", "podFailurePolicy"); found {
		t.Error("podFailurePolicy without FailJobOnExitCodes")
	}
	if rp, _, _ := unstructured.NestedString(pj, "template", "spec", "template", "spec", "restartPolicy"); rp != "OnFailure" {
		t.Errorf("restartPolicy %q, want the caller's OnFailure", rp)
	}
}

// TestJobSetRestartsThenFails runs JobSet v0.12.0 beside a real control plane: a worker's
// failure recreates all workers (restart 1), and the next one, past maxRestarts 1, fails
// the JobSet.
func TestJobSetRestartsThenFails(t *testing.T) {
	if os.Getenv("FAULTLINE_JOBSET") != "1" {
		t.Skip("starts a control plane and JobSet (benchmark infrastructure; the first run builds JobSet, minutes): " +
			"run with FAULTLINE_JOBSET=1 go test ./test/cluster/ -run TestJobSet -v")
	}
	if testing.Short() {
		t.Skip("needs the local control plane; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	// Two 8-GPU nodes: the 4 replacements may be scheduled while the 4 old pods still hold GPUs.
	c, err := cluster.Start(ctx, cluster.Options{Name: "jobset", Nodes: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if dir, err := c.SaveLogs(filepath.Join(c.Tools.Root, "_output", "test-logs")); err == nil {
				t.Logf("cluster logs saved in %s", dir)
			}
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})

	startJS := time.Now()
	js, err := c.StartJobSet(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("StartJobSet: %s (JobSet %s pid %d, log %s)", time.Since(startJS).Round(time.Millisecond), js.Version, js.Pid(), js.LogPath)
	t.Cleanup(func() {
		js.Stop()
		if t.Failed() {
			t.Logf("jobset.log (last 50 lines of %s):\n%s", js.LogPath, js.Tail(50))
		}
	})

	ns := c.Namespace(t)
	const name = "train"
	obj := cluster.NewJobSet(cluster.JobSetSpec{
		Name: name, Namespace: ns, Workers: 4, PodTemplate: workerTemplate(), MaxRestarts: 1,
	})
	created := time.Now()
	if _, err := js.Client.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create JobSet: %v", err)
	}

	// runningAttempt waits until the 4 workers of one restart attempt are Running.
	runningAttempt := func(attempt int) []*corev1.Pod {
		t.Helper()
		sel := labels.SelectorFromSet(labels.Set{
			cluster.JobSetNameLabel:           name,
			cluster.JobSetRestartAttemptLabel: strconv.Itoa(attempt),
		})
		var running []*corev1.Pod
		_, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
			running = running[:0]
			for _, p := range pods {
				if cluster.PodRunning(p) {
					running = append(running, p)
				}
			}
			return len(running) == 4, nil
		})
		if err != nil {
			t.Fatalf("4 Running workers of restart attempt %d: %v (running: %d)", attempt, err, len(running))
		}
		return running
	}
	fail := func(p *corev1.Pod) {
		t.Helper()
		if err := c.FailPod(ctx, ns, p.Name, cluster.Failure{ExitCode: 1, Message: "simulated worker crash"}); err != nil {
			t.Fatal(err)
		}
	}

	pods := runningAttempt(0)
	t.Logf("4 workers Running %s after create", time.Since(created).Round(time.Millisecond))

	failed := time.Now()
	fail(pods[0])
	if _, err := js.Wait(ctx, ns, name, func(u *unstructured.Unstructured) (bool, error) {
		return cluster.JobSetRestarts(u) >= 1, nil
	}); err != nil {
		t.Fatalf("JobSet did not restart after %s failed: %v", pods[0].Name, err)
	}
	t.Logf("status.restarts = 1 %s after the first failure", time.Since(failed).Round(time.Millisecond))
	pods = runningAttempt(1)
	t.Logf("4 new workers Running %s after the first failure", time.Since(failed).Round(time.Millisecond))

	failed = time.Now()
	fail(pods[0])
	got, err := js.Wait(ctx, ns, name, func(u *unstructured.Unstructured) (bool, error) {
		cond, ok := cluster.JobSetCondition(u, "Failed")
		return ok && cond.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("JobSet did not fail after %s failed past maxRestarts: %v", pods[0].Name, err)
	}
	cond, _ := cluster.JobSetCondition(got, "Failed")
	t.Logf("Failed=True %s after the second failure: %s: %s", time.Since(failed).Round(time.Millisecond), cond.Reason, cond.Message)
	if cond.Reason != "ReachedMaxRestarts" {
		t.Errorf("Failed reason %q, want ReachedMaxRestarts", cond.Reason)
	}
	if n := cluster.JobSetRestarts(got); n != 1 {
		t.Errorf("status.restarts %d, want 1", n)
	}
	t.Logf("whole test (cluster included): %s", time.Since(begin).Round(time.Millisecond))
}
