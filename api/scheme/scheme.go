// Package scheme is the runtime.Scheme that faultline's controller and clients share:
// Kubernetes' built-in types and faultline.dev/v1alpha1. It lives beside the API, apart
// from it, so that the API package does not pull in client-go.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// New returns a scheme that knows the built-in types and faultline's.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}
