package trust

import (
	"context"
	"fmt"
	"k8s.io/client-go/kubernetes"
	"testing"
	"time"

	apischeme "github.com/faultline-dev/faultline/api/scheme"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

const scenarioTimeout = 2 * time.Minute

// The installed controller's and agent's identities (deploy/controller, deploy/daemonset).
const (
	systemNamespace = "faultline-system"
	controllerSA    = "faultline-controller"
)

// testScheme knows the built-in types and faultline's, as the controller and launcher do.
var testScheme = apischeme.New()

// clientFor is a client that authenticates with cfg and knows TrainingRuns.
func clientFor(t testing.TB, cfg *rest.Config) client.WithWatch {
	t.Helper()
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// tenant creates a ServiceAccount in ns bound to the built-in edit ClusterRole there, and
// returns a client with its token alone: what a team member or a CI job of the namespace has.
// It returns once RBAC lets the tenant create TrainingRuns (the aggregated role included).
func tenant(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) (client.WithWatch, string) {
	t.Helper()
	const name = "tenant"
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, cfg, err := c.ServiceAccountKubeconfig(ctx, ns, name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cl := clientFor(t, cfg)
	probe := newRun("rbac-probe", 1)
	probe.Namespace = ns
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cl.Create(ctx, probe.DeepCopy(), client.DryRunAll) == nil, nil
	})
	if err != nil {
		t.Fatalf("the edit role never let tenant %s/%s create TrainingRuns (faultline-trainingruns-edit aggregated?): %v", ns, name, err)
	}
	return cl, "system:serviceaccount:" + ns + ":" + name
}

// startController runs `launcher controller` for namespace ns with the token of the
// installed controller's ServiceAccount (its RBAC, its admission policy) and args appended.
func startController(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, args ...string) *cluster.Process {
	t.Helper()
	kubeconfig, _, err := c.ServiceAccountKubeconfig(ctx, systemNamespace, controllerSA, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cluster.StartProcess(t, launcherBin, append([]string{"controller",
		"--kubeconfig", kubeconfig,
		"--namespace", ns,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}, args...)...)
}

// newRun is a TrainingRun of workers workers with one GPU each.
func newRun(name string, workers int32) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrainingRunSpec{
			Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "worker", Image: "trainer:latest",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.ResourceGPU: resource.MustParse("1")}},
				}},
			}},
		},
	}
}

// waitRun watches the run until cond holds and returns it; it fails the test otherwise.
func waitRun(ctx context.Context, t *testing.T, cl client.WithWatch, ns, name, what string, cond func(*v1alpha1.TrainingRun) bool) *v1alpha1.TrainingRun {
	t.Helper()
	w, err := cl.Watch(ctx, &v1alpha1.TrainingRunList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatalf("watch TrainingRun %s/%s: %v", ns, name, err)
	}
	defer w.Stop()
	var last *v1alpha1.TrainingRun
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("TrainingRun %s/%s: %s: not observed (%v); last seen: %s", ns, name, what, ctx.Err(), describe(last))
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("TrainingRun %s/%s: %s: watch closed; last seen: %s", ns, name, what, describe(last))
			}
			if r, isRun := e.Object.(*v1alpha1.TrainingRun); isRun && e.Type != watch.Deleted {
				if last = r; cond(r) {
					return r
				}
			}
		}
	}
}

func describe(run *v1alpha1.TrainingRun) string {
	if run == nil {
		return "<none>"
	}
	s := fmt.Sprintf("phase=%s attempt=%d restarts=%+v", run.Status.Phase, run.Status.Attempt, run.Status.Restarts)
	if lf := run.Status.LastFailure; lf != nil {
		s += fmt.Sprintf(" lastFailure=%s/%s: %s", lf.Class, lf.Cause, lf.Explanation)
	}
	return s
}

// runningWorkers waits until every worker of the run's attempt 1 is Running and returns them.
func runningWorkers(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, run string, workers int) []*corev1.Pod {
	t.Helper()
	sel := labels.SelectorFromSet(labels.Set{v1alpha1.LabelRun: run, v1alpha1.LabelAttempt: "1"})
	pods, err := c.WaitPods(ctx, ns, sel, func(pods []*corev1.Pod) (bool, error) {
		return cluster.CountRunning(pods) == workers, nil
	})
	if err != nil {
		t.Fatalf("workers of %s Running: %v", run, err)
	}
	return pods
}

// createPod creates a Running pod on node, with labels and finalizers, as the scheduler
// would bind it.
func createPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name, node string, podLabels map[string]string, finalizers ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: podLabels, Finalizers: finalizers},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "worker", Image: "trainer:latest"}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	pods, err := c.WaitPods(ctx, ns, labels.SelectorFromSet(podLabels), func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Name == name && cluster.PodRunning(p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s Running: %v", name, err)
	}
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// dropFinalizers removes the test's finalizers from a pod, so that its namespace can go.
func dropFinalizers(t *testing.T, c *cluster.Cluster, pod *corev1.Pod) {
	t.Cleanup(func() {
		_, _ = c.Client.CoreV1().Pods(pod.Namespace).Patch(context.Background(), pod.Name, "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
}

// controllerClient is a client with the controller's own ServiceAccount token.
func controllerClient(ctx context.Context, t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	_, cfg, err := c.ServiceAccountKubeconfig(ctx, systemNamespace, controllerSA, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
