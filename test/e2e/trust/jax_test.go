package trust

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/workeraccess"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EJaxNoArgumentInit: a bare jax.distributed.initialize() works in the pods of a jax
// run. With jax[k8s] installed, JAX's K8sCluster (jax/_src/clusters/k8s_cluster.py) loads
// the pod's mounted token and asks the API server, as the pod's service account, for
//   - its pod: list_namespaced_pod(namespace, field_selector="status.podIP=<its IP>"),
//   - its Job: read_namespaced_job(<the pod's job-name label>, namespace),
//
// and takes the process count from the Job's spec.parallelism, the process id from
// JOB_COMPLETION_INDEX, the coordinator from JAX_COORDINATOR_ADDRESS (else
// '<job>-0.<pod subdomain>:55527'). The controller, with its installed RBAC and admission
// policies, gives the run's pods the service account <run>-workers; the same calls, made
// with that account's token against the real API server, answer what JAX needs, and
// nothing beyond them is allowed. The controller cannot create a broader Role, and the
// objects go with the run.
func TestE2EJaxNoArgumentInit(t *testing.T) {
	t.Parallel()
	const workers = 2
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	startController(ctx, t, c, ns, "--leader-elect=false")
	run := newRun("lm", workers)
	run.Namespace = ns
	run.Spec.Framework = "jax"
	cl := clientFor(t, c.Config)
	if err := cl.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	running := waitRun(ctx, t, cl, ns, run.Name, "every worker Running", func(r *v1alpha1.TrainingRun) bool {
		return r.Status.Phase == v1alpha1.PhaseRunning
	})
	// The framework's choices are written into the spec the user left unset.
	if running.Spec.RestartScope != v1alpha1.RestartScopeGang || running.Spec.SuccessPolicy != v1alpha1.SuccessPolicyAllWorkers {
		t.Errorf("spec.restartScope %q, spec.successPolicy %q: want the jax plugin's Gang and AllWorkers written into the spec", running.Spec.RestartScope, running.Spec.SuccessPolicy)
	}

	sa := workeraccess.Name(running)
	job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, run.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Spec.Template.Spec.ServiceAccountName; got != sa {
		t.Fatalf("the Job's pods run as service account %q, want %q", got, sa)
	}
	account, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if account.AutomountServiceAccountToken == nil || !*account.AutomountServiceAccountToken {
		t.Errorf("service account %s: automountServiceAccountToken %v, want true (JAX reads the mounted token)", sa, account.AutomountServiceAccountToken)
	}
	for _, obj := range []client.Object{account, mustRole(ctx, t, c, ns, sa), mustBinding(ctx, t, c, ns, sa)} {
		if !metav1.IsControlledBy(obj, running) {
			t.Errorf("%T %s is not controlled by the run: %v", obj, obj.GetName(), obj.GetOwnerReferences())
		}
	}

	// JAX's calls, with the workers' token.
	_, cfg, err := c.ServiceAccountKubeconfig(ctx, ns, sa, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	asWorker, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelRun + "=" + run.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != workers {
		t.Fatalf("%d pods, want %d", len(pods.Items), workers)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.PodIP == "" {
			// kwok, the simulated kubelet, gives pods an IP only on nodes with a pod CIDR,
			// which this cluster's nodes lack: the IP is what a kubelet would report.
			ip := fmt.Sprintf("10.250.0.%d", 10+i)
			patch := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, ip, ip)
			updated, err := c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			if err != nil {
				t.Fatalf("give pod %s an IP: %v", p.Name, err)
			}
			*p = *updated
		}
		// K8sCluster._pod
		found, err := asWorker.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.podIP", p.Status.PodIP).String()})
		if err != nil {
			t.Fatalf("list pods by IP as %s (JAX's _pod): %v", sa, err)
		}
		if len(found.Items) != 1 || found.Items[0].Name != p.Name {
			t.Fatalf("pods with IP %s: %d, want exactly %s (JAX unpacks [pod])", p.Status.PodIP, len(found.Items), p.Name)
		}
		me := found.Items[0]
		if me.Spec.Subdomain == "" {
			t.Errorf("pod %s has no subdomain: JAX would list services (_headless_svc), which the Role does not grant", me.Name)
		}
		ctrlRef := metav1.GetControllerOf(&me)
		if ctrlRef == nil || ctrlRef.Kind != "Job" {
			t.Errorf("pod %s: controller %v, JAX supports only a Job's", me.Name, ctrlRef)
		}
		// K8sCluster._job
		got, err := asWorker.BatchV1().Jobs(ns).Get(ctx, me.Labels["job-name"], metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get job %q as %s (JAX's _job): %v", me.Labels["job-name"], sa, err)
		}
		if got.Spec.Parallelism == nil || *got.Spec.Parallelism != workers {
			t.Errorf("job %s parallelism %v, want %d (JAX's process count)", got.Name, got.Spec.Parallelism, workers)
		}
		if _, ok := attempt.Index(&me); !ok {
			t.Errorf("pod %s has no completion index (JAX's process id, JOB_COMPLETION_INDEX)", me.Name)
		}
	}

	// Nothing beyond it.
	denied := map[string]error{}
	_, denied["get another Job"] = asWorker.BatchV1().Jobs(ns).Get(ctx, "other", metav1.GetOptions{})
	_, denied["list Jobs"] = asWorker.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	_, denied["list services"] = asWorker.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	_, denied["get a pod"] = asWorker.CoreV1().Pods(ns).Get(ctx, pods.Items[0].Name, metav1.GetOptions{})
	_, denied["watch pods"] = asWorker.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	denied["delete a pod"] = asWorker.CoreV1().Pods(ns).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	_, denied["list pods of another namespace"] = asWorker.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{})
	_, denied["list secrets"] = asWorker.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	for what, err := range denied {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as %s: %v, want 403 Forbidden", what, sa, err)
		}
	}

	// The controller's own token cannot create a broader Role, or bind one to anyone else.
	asController := controllerClient(ctx, t, c)
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(running, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	broader := workeraccess.Role(running)
	broader.Name, broader.ResourceVersion = "lm2-workers", ""
	broader.Rules[0].Verbs = []string{"list", "delete"}
	_, err = asController.RbacV1().Roles(ns).Create(ctx, broader, dry)
	requireForbidden(t, "controller creating a Role with more than JAX's rules", err)
	anyJob := workeraccess.Role(running)
	anyJob.Rules[1].ResourceNames = nil
	anyJob.OwnerReferences = owner
	_, err = asController.RbacV1().Roles(ns).Create(ctx, anyJob, dry)
	requireForbidden(t, "controller creating a Role that gets every Job", err, "its rules must be list pods and get job lm")
	toOther := workeraccess.RoleBinding(running)
	toOther.Subjects = append(toOther.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns})
	_, err = asController.RbacV1().RoleBindings(ns).Create(ctx, toOther, dry)
	requireForbidden(t, "controller binding the Role to another account too", err, "it may only bind Role lm-workers")
	_, err = asController.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}, dry)
	requireForbidden(t, "controller creating a service account of no run", err, "only <run>-workers")

	// They go with the run.
	if err := cl.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, sa, metav1.GetOptions{})
		_, err2 := c.Client.RbacV1().Roles(ns).Get(ctx, sa, metav1.GetOptions{})
		_, err3 := c.Client.RbacV1().RoleBindings(ns).Get(ctx, sa, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2) && apierrors.IsNotFound(err3), nil
	})
	if err != nil {
		t.Errorf("the workers' ServiceAccount, Role and RoleBinding outlived the run: %v", err)
	}
}

func mustRole(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *rbacv1.Role {
	t.Helper()
	r, err := c.Client.RbacV1().Roles(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustBinding(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, name string) *rbacv1.RoleBinding {
	t.Helper()
	b, err := c.Client.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
