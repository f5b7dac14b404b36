package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestRunAsksForGPUsThroughDRA (issue 58): a run with spec.gpus gets, before its first attempt,
// a ResourceClaimTemplate of its own (named as the run, controlled by it: exactly count devices
// of the class), and its workers a claim from it, held by the worker container. A class the
// cluster does not have holds the attempt, Stalled with the field and the fix, and no worker
// is left Pending on a claim nothing can allocate.
func TestRunAsksForGPUsThroughDRA(t *testing.T) {
	const class = "gpu.example.com"
	for name, hasClass := range map[string]bool{"class found": true, "no such class": false} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			run := makeRun("llm", 4).obj()
			run.Status.Phase = v1alpha1.PhasePending
			run.Spec.GPUs = &v1alpha1.GPUClaim{DeviceClassName: class, Count: 8}
			run.Spec.Template.Spec.Containers = []corev1.Container{{Name: "worker", Image: "trainer"}, {Name: "sidecar", Image: "logs"}}
			objs := []client.Object{run}
			if hasClass {
				objs = append(objs, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class}})
			}
			cl := reconcileOnce(t, run, objs, nil)
			job := &batchv1.Job{}
			jobErr := cl.Get(ctx, client.ObjectKeyFromObject(run), job)
			tmpl := &resourcev1.ResourceClaimTemplate{}
			tmplErr := cl.Get(ctx, client.ObjectKeyFromObject(run), tmpl)
			if !hasClass {
				if !apierrors.IsNotFound(jobErr) || !apierrors.IsNotFound(tmplErr) {
					t.Errorf("Job: %v, ResourceClaimTemplate: %v; want neither without the DeviceClass", jobErr, tmplErr)
				}
				got := &v1alpha1.TrainingRun{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
					t.Fatal(err)
				}
				if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionStalled); c == nil || c.Reason != v1alpha1.ReasonDeviceClassNotFound ||
					!strings.Contains(c.Message, "spec.gpus.deviceClassName") || !strings.Contains(c.Message, class) {
					t.Errorf("condition Stalled %+v, want reason %s naming spec.gpus.deviceClassName and %s", c, v1alpha1.ReasonDeviceClassNotFound, class)
				}
				return
			}
			if jobErr != nil || tmplErr != nil {
				t.Fatalf("Job: %v, ResourceClaimTemplate: %v", jobErr, tmplErr)
			}
			if !metav1.IsControlledBy(tmpl, run) {
				t.Errorf("ResourceClaimTemplate owners %+v, want the run as controller", tmpl.OwnerReferences)
			}
			reqs := tmpl.Spec.Spec.Devices.Requests
			if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != class ||
				reqs[0].Exactly.AllocationMode != resourcev1.DeviceAllocationModeExactCount || reqs[0].Exactly.Count != 8 {
				t.Errorf("ResourceClaimTemplate requests %+v, want exactly 8 devices of %s", reqs, class)
			}
			spec := job.Spec.Template.Spec
			want := corev1.PodResourceClaim{Name: v1alpha1.ClaimGPUs, ResourceClaimTemplateName: ptr.To(run.Name)}
			if len(spec.ResourceClaims) != 1 || spec.ResourceClaims[0].Name != want.Name || ptr.Deref(spec.ResourceClaims[0].ResourceClaimTemplateName, "") != run.Name {
				t.Errorf("workers' resourceClaims %+v, want %+v", spec.ResourceClaims, want)
			}
			holds := func(c corev1.Container) bool {
				return slices.Contains(c.Resources.Claims, corev1.ResourceClaim{Name: v1alpha1.ClaimGPUs})
			}
			if !holds(spec.Containers[0]) || holds(spec.Containers[1]) {
				t.Errorf("claims of the containers: %+v, %+v; want the worker container's only", spec.Containers[0].Resources.Claims, spec.Containers[1].Resources.Claims)
			}
		})
	}
}
