package controller

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// rolesPolicyMissing says why the pods of a run laid out in roles (layout, the value of
// v1alpha1.AnnotationRoles) would start without their role, or "": the admission policy
// faultline-roles (deploy/admission/roles.yaml) labels them as they are created, and without
// it the downward API gives every pod an empty role, which leaves a framework's rendezvous
// (TensorFlow's task) broken in every pod. Asked before each attempt of such a run, so that
// the run waits, Stalled with the fix, instead of starting pods that cannot work; both the
// policy and its binding must exist (a policy without a binding does nothing). A controller
// that may not read them (an older installation's RBAC) cannot tell, and goes on.
func (r *Reconciler) rolesPolicyMissing(ctx context.Context, layout string) (string, error) {
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind(kind))
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: v1alpha1.RolesPolicyName}, obj)
		switch {
		case err == nil, apierrors.IsForbidden(err):
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			return fmt.Sprintf("the framework lays the run's pods out in roles (%s), and the %s %s, which labels each pod with its role as it is created, is not installed "+
				"(Kubernetes 1.36 or later serves it): install faultline's admission policies (launcher install --components admission, "+
				"or kubectl apply --server-side -k deploy/admission); the run starts once it is there", layout, kind, v1alpha1.RolesPolicyName), nil
		default:
			return "", fmt.Errorf("get %s %s: %w", kind, v1alpha1.RolesPolicyName, err)
		}
	}
	return "", nil
}
