package trust

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
	"github.com/faultline-dev/faultline/test/procstat"
)

// BenchmarkAdmissionCostOfPlainPods measures what faultline's admission policies cost the
// pods that are not faultline's (issue 38, item 5): the API server's CPU time for a burst of
// status writes of plain pods (a kubelet's everyday traffic), with faultline's policies bound
// as installed and with their bindings removed, in one run, alternating, rounds times. It
// reports the API server's CPU per 1,000 writes each way and their ratio (the goal: at most
// 1.05). A ValidatingAdmissionPolicy whose match constraints take a request converts the pod
// and the pod it replaces to unstructured data for CEL before its first match condition; an
// object selector is matched before that. Run: make bench, or
//
//	go test -run '^$' -bench AdmissionCostOf -benchtime 1x ./test/e2e/trust
func BenchmarkAdmissionCostOfPlainPods(b *testing.B) {
	admissionCost(b, "plain", map[string]string{"app": "plain"})
}

// BenchmarkAdmissionCostOfWorkerPods is the same burst for pods labelled as a run's workers:
// what a restart's pod status writes (the kubelets' and the agents', every one of a worker)
// pay the policies, which all concern workers. 1 - 1/ratio is the admission's share of the
// API server's CPU for those writes. The object selectors that spare plain pods select
// workers, so they change nothing here.
func BenchmarkAdmissionCostOfWorkerPods(b *testing.B) {
	admissionCost(b, "worker", map[string]string{v1alpha1.LabelRun: "bench", v1alpha1.LabelRunUID: "bench-uid", v1alpha1.LabelAttempt: "1"})
}

// admissionCost measures the API server's CPU for status writes of pods with those labels,
// with faultline's policies and without, and reports both and their ratio.
func admissionCost(b *testing.B, kind string, podLabels map[string]string) {
	const (
		pods   = 16
		writes = 4000
		rounds = 3
		// parallel writers, as many kubelets would be.
		writers = 8
	)
	c := cluster.Shared(b)
	ns := c.Namespace(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pid, err := apiServerPID(c)
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for i := range pods {
		// No node has the label: the pod stays Pending, and only the benchmark writes it.
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", kind, i), Namespace: ns, Labels: podLabels},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"bench.faultline.dev/none": "none"},
				Containers:   []corev1.Container{{Name: "app", Image: "app:latest"}},
			},
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		names = append(names, p.Name)
	}
	probe := createProbe(ctx, b, c, ns)
	burst := func() time.Duration {
		before, err := procstat.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				for i := w; i < writes; i += writers {
					patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"bench.faultline.dev/Tick","status":"True","reason":"Tick","message":"%d"}]}}`, i)
					if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, names[i%pods], types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		after, err := procstat.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		return after - before
	}
	burst() // warm: the API server's caches, the client's connections

	var with, without time.Duration
	for r := range rounds {
		w := burst()
		saved := unbindPolicies(ctx, b, c)
		waitPolicies(ctx, b, c, probe, false)
		wo := burst()
		rebindPolicies(ctx, b, c, saved)
		waitPolicies(ctx, b, c, probe, true)
		b.Logf("round %d: API server CPU for %d %s-pod status writes: with faultline's policies %s, without %s (%.3f×)", r+1, writes, kind, w, wo, float64(w)/float64(wo))
		with += w
		without += wo
	}
	perK := func(d time.Duration) float64 { return float64(d.Milliseconds()) / rounds / (writes / 1000) }
	b.ReportMetric(perK(with), "apiserver-cpu-ms/1k-writes-with")
	b.ReportMetric(perK(without), "apiserver-cpu-ms/1k-writes-without")
	b.ReportMetric(float64(with)/float64(without), "ratio")
}

// apiServerPID is the pid of the cluster's kube-apiserver, as kwokctl keeps it.
func apiServerPID(c *cluster.Cluster) (int, error) {
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(c.Kubeconfig), "pids", "kube-apiserver.pid"))
	if err != nil {
		return 0, fmt.Errorf("the API server's pid: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// createProbe makes a pod that looks like a worker (its run label), on which the identity
// policy refuses a relabel: how the benchmark knows when the policies apply.
func createProbe(ctx context.Context, b *testing.B, c *cluster.Cluster, ns string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: map[string]string{v1alpha1.LabelRun: "probe"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"bench.faultline.dev/none": "none"},
			Containers:   []corev1.Container{{Name: "app", Image: "app:latest"}},
		},
	}
	got, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return got
}

// waitPolicies waits until the policies apply (bound) or no longer do: a binding takes
// effect some time after it is written, and nothing can be watched for that. The probe is a
// dry-run relabel of a worker, which the identity policy refuses.
func waitPolicies(ctx context.Context, b *testing.B, c *cluster.Cluster, probe *corev1.Pod, bound bool) {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"other"}}}`, v1alpha1.LabelRun)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(probe.Namespace).Patch(ctx, probe.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) == bound, nil
	})
	if err != nil {
		b.Fatalf("faultline's policies never became %s: %v", map[bool]string{true: "bound", false: "unbound"}[bound], err)
	}
}

// policyBindings are faultline's bindings, as installed.
type policyBindings struct {
	validating []admissionregistrationv1.ValidatingAdmissionPolicyBinding
	mutating   []admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// unbindPolicies deletes faultline's policy bindings and returns them.
func unbindPolicies(ctx context.Context, b *testing.B, c *cluster.Cluster) policyBindings {
	adm := c.Client.AdmissionregistrationV1()
	var saved policyBindings
	vs, err := adm.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range vs.Items {
		if strings.HasPrefix(v.Name, "faultline-") {
			saved.validating = append(saved.validating, v)
			if err := adm.ValidatingAdmissionPolicyBindings().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	ms, err := adm.MutatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range ms.Items {
		if strings.HasPrefix(m.Name, "faultline-") {
			saved.mutating = append(saved.mutating, m)
			if err := adm.MutatingAdmissionPolicyBindings().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if len(saved.validating) == 0 {
		b.Fatal("no faultline ValidatingAdmissionPolicyBinding installed: nothing to compare")
	}
	return saved
}

// rebindPolicies writes the bindings back as they were.
func rebindPolicies(ctx context.Context, b *testing.B, c *cluster.Cluster, saved policyBindings) {
	adm := c.Client.AdmissionregistrationV1()
	for _, v := range saved.validating {
		v.ObjectMeta = metav1.ObjectMeta{Name: v.Name, Labels: v.Labels, Annotations: v.Annotations}
		if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &v, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range saved.mutating {
		m.ObjectMeta = metav1.ObjectMeta{Name: m.Name, Labels: m.Labels, Annotations: m.Annotations}
		if _, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, &m, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
