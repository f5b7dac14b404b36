// Package rendezvous gives every worker of a TrainingRun a stable address and the common
// FAULTLINE_* environment: a headless Service named after the run, and per-index DNS names
// <run>-<index>.<run>.<namespace>.svc that never change across attempts (the Job keeps the
// run's name), so a restarted gang finds its coordinator where the last one was.
package rendezvous

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// IndexFieldPath is the downward-API field of a worker's completion index, from which
// FAULTLINE_INDEX is set.
var IndexFieldPath = fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)

// ServiceName is the headless Service of a run; it is also the pods' subdomain.
func ServiceName(run *v1alpha1.TrainingRun) string { return run.Name }

// Hostname is the hostname of the worker with this index. The Job controller names Indexed
// Job pods' hostnames <job>-<index> when the template sets a subdomain, which is what we need.
func Hostname(run *v1alpha1.TrainingRun, index int) string {
	return run.Name + "-" + strconv.Itoa(index)
}

// Address is the stable DNS name of a worker: <run>-<index>.<run>.<namespace>.svc.
func Address(run *v1alpha1.TrainingRun, index int) string {
	return fmt.Sprintf("%s.%s.%s.svc", Hostname(run, index), ServiceName(run), run.Namespace)
}

// Service is the headless Service that publishes every worker's address, Ready or not:
// frameworks resolve their peers while they are still starting up. It selects the run's own
// workers by its UID: the stopping workers of an earlier run of the same name have the same
// hostnames, and a new worker must never resolve one of them.
func Service(run *v1alpha1.TrainingRun) *corev1.Service {
	own := map[string]string{v1alpha1.LabelRun: run.Name, v1alpha1.LabelRunUID: string(run.UID)}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      ServiceName(run),
			Namespace: run.Namespace,
			Labels:    own,
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 own,
			PublishNotReadyAddresses: true,
		},
	}
}

// Env is the environment set in every container of an attempt. FAULTLINE_INDEX comes first
// so that later variables (a plugin's) can build on it with $(FAULTLINE_INDEX).
func Env(run *v1alpha1.TrainingRun, attempt int32) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: v1alpha1.EnvIndex, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: IndexFieldPath,
		}}},
		{Name: v1alpha1.EnvRun, Value: run.Name},
		{Name: v1alpha1.EnvAttempt, Value: strconv.Itoa(int(attempt))},
		{Name: v1alpha1.EnvWorldSize, Value: strconv.Itoa(int(run.Spec.Workers))},
		{Name: v1alpha1.EnvService, Value: fmt.Sprintf("%s.%s.svc", ServiceName(run), run.Namespace)},
	}
}

// RoleEnv are the variables of a pod's role, in a run whose plugin lays its indexes out in
// roles: read from the labels that the faultline-roles admission policy puts on each pod
// (deploy/admission/roles.yaml), since a role is not a substitution of the completion index.
func RoleEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: v1alpha1.EnvRole, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: RoleFieldPath}}},
		{Name: v1alpha1.EnvRoleIndex, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: RoleIndexFieldPath}}},
	}
}

// RoleFieldPath and RoleIndexFieldPath are the Downward API paths of a pod's role labels.
var (
	RoleFieldPath      = "metadata.labels['" + v1alpha1.LabelRole + "']"
	RoleIndexFieldPath = "metadata.labels['" + v1alpha1.LabelRoleIndex + "']"
)
