// Package workeraccess builds what a run's workers need to read their own Job and the pods
// of their namespace through the Kubernetes API, for frameworks whose processes find their
// gang that way (framework.Rendezvous.ReadJobAndPods): JAX's Kubernetes cluster detection,
// jax/_src/clusters/k8s_cluster.py, behind a bare jax.distributed.initialize(). It is pure:
// the controller creates the objects, owned by the run, so that they go with it.
//
// What JAX calls, and so all the Role grants (k8s_cluster.py, K8sCluster):
//   - _pod: CoreV1Api.list_namespaced_pod(namespace, field_selector="status.podIP=<ip>"),
//     a list of the namespace's pods (RBAC cannot narrow a list by a field selector);
//   - _job: BatchV1Api.read_namespaced_job(<the pod's job-name label>, namespace), a get of
//     the run's Job, which is named after the run: narrowed to that name;
//   - _headless_svc, a list of services, only when the pod has no subdomain: faultline's
//     pods always have one (the run's headless Service), so it is not granted.
//
// The namespace comes from the mounted token's directory, the process count from the
// Job's spec.parallelism, the process id from JOB_COMPLETION_INDEX, and the coordinator is
// '<job>-0.<subdomain>:55527' unless JAX_COORDINATOR_ADDRESS is set, which wins
// (jax/_src/distributed.py). So the token must be mounted: the ServiceAccount says so.
package workeraccess

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// Name is the name of a run's workers' ServiceAccount, Role and RoleBinding.
func Name(run *v1alpha1.TrainingRun) string { return v1alpha1.WorkerAccessName(run.Name) }

// Rules are the Role's rules for run: list pods, get the run's Job. Nothing else: no watch,
// no other Job, no write. deploy/admission/controller.yaml allows the controller to create
// a Role with exactly these rules and no other.
func Rules(run *v1alpha1.TrainingRun) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get"}, ResourceNames: []string{run.Name}},
	}
}

func meta(run *v1alpha1.TrainingRun) metav1.ObjectMeta {
	labels := attempt.Labels(run, 0)
	delete(labels, v1alpha1.LabelAttempt) // the run's, not an attempt's
	return metav1.ObjectMeta{
		Name:            Name(run),
		Namespace:       run.Namespace,
		Labels:          labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))},
	}
}

// ServiceAccount is the workers' identity. Its token is mounted (JAX reads it, with the
// namespace beside it, from /var/run/secrets/kubernetes.io/serviceaccount).
func ServiceAccount(run *v1alpha1.TrainingRun) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: meta(run), AutomountServiceAccountToken: ptr.To(true)}
}

// Role grants Rules in the run's namespace.
func Role(run *v1alpha1.TrainingRun) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: meta(run), Rules: Rules(run)}
}

// RoleBinding binds Role to ServiceAccount, and to nobody else.
func RoleBinding(run *v1alpha1.TrainingRun) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: meta(run),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: Name(run)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: Name(run), Namespace: run.Namespace}},
	}
}
