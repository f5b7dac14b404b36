// Package gpuclaim asks for a run's GPUs through Dynamic Resource Allocation (spec.gpus): one
// ResourceClaimTemplate per run, named as the run, and in every worker's pod a claim made
// from it, so that each worker gets devices of its own on its own node (a ResourceClaim named
// in the pod would be one allocation shared by the whole gang, on one node).
package gpuclaim

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// request is the name of the template's one device request.
const request = "gpus"

// Count is how many GPUs each worker asks for through spec.gpus (0: none, or through the
// device plugin).
func Count(run *v1alpha1.TrainingRun) int64 {
	if run.Spec.GPUs == nil {
		return 0
	}
	return int64(max(run.Spec.GPUs.Count, 1)) // the CRD's default, for a run the API server did not default
}

// Template is the run's ResourceClaimTemplate (nil when the run asks for no GPUs through DRA):
// exactly Count devices of the DeviceClass, the form Kueue counts against its quota.
func Template(run *v1alpha1.TrainingRun) *resourcev1.ResourceClaimTemplate {
	if run.Spec.GPUs == nil {
		return nil
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: run.Name, Namespace: run.Namespace,
			Labels: map[string]string{v1alpha1.LabelRun: run.Name},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{
					Name: request,
					Exactly: &resourcev1.ExactDeviceRequest{
						DeviceClassName: run.Spec.GPUs.DeviceClassName,
						AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
						Count:           Count(run),
					},
				}},
			}},
		},
	}
}

// Apply gives spec (a worker's pod spec of run) its claim from the run's template, held by the
// worker container (the first). It does nothing for a run that asks for no GPUs through DRA,
// or for a spec that has the claim already.
func Apply(spec *corev1.PodSpec, run *v1alpha1.TrainingRun) {
	if run.Spec.GPUs == nil || len(spec.Containers) == 0 {
		return
	}
	for _, c := range spec.ResourceClaims {
		if c.Name == v1alpha1.ClaimGPUs {
			return
		}
	}
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: v1alpha1.ClaimGPUs, ResourceClaimTemplateName: ptr.To(run.Name)})
	w := &spec.Containers[0]
	w.Resources.Claims = append(w.Resources.Claims, corev1.ResourceClaim{Name: v1alpha1.ClaimGPUs})
}
