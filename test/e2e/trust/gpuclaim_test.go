package trust

import (
	"context"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/gpuclaim"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EControllerGPUClaimTemplatesAreConfined (issue 58): the controller may create a run's
// ResourceClaimTemplate (spec.gpus), as pkg/gpuclaim makes it, and nothing else with that
// right: no template that its run does not control or that is named otherwise, none that asks
// for more than exact devices of a class (a selector, a driver's configuration), and no
// change or deletion of any (the garbage collector deletes them with their runs).
func TestE2EControllerGPUClaimTemplatesAreConfined(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	templates := controllerClient(ctx, t, c).ResourceV1().ResourceClaimTemplates(ns)
	dry := []string{metav1.DryRunAll}
	create := func(tmpl *resourcev1.ResourceClaimTemplate) error {
		_, err := templates.Create(ctx, tmpl, metav1.CreateOptions{DryRun: dry})
		return err
	}
	ours := func() *resourcev1.ResourceClaimTemplate {
		run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns, UID: "3e0f6f8e-0000-4000-8000-000000000002"},
			Spec: v1alpha1.TrainingRunSpec{GPUs: &v1alpha1.GPUClaim{DeviceClassName: "gpu.nvidia.com", Count: 8}}}
		tmpl := gpuclaim.Template(run)
		tmpl.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind(v1alpha1.KindTrainingRun))}
		return tmpl
	}
	renamed := ours()
	renamed.Name = "other"
	// A policy takes effect some time after it is created, with nothing to watch: wait until
	// a foreign template is refused (a dry run, so nothing changes either way).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(create(renamed)), nil
	}); err != nil {
		t.Fatalf("the controller's template named other than its run was never refused: %v (last: %v)", err, create(renamed))
	}
	if err := create(ours()); err != nil {
		t.Fatalf("the controller creating a run's ResourceClaimTemplate: %v", err)
	}
	requireForbidden(t, "a template named other than its run", create(renamed), "only one named as its TrainingRun and controlled by it")
	orphan := ours()
	orphan.OwnerReferences = nil
	requireForbidden(t, "a template no run controls", create(orphan), "only one named as its TrainingRun and controlled by it")
	selected := ours()
	selected.Spec.Spec.Devices.Requests[0].Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}
	requireForbidden(t, "a template with a selector", create(selected), "only one request of exact devices of a DeviceClass")
	configured := ours()
	configured.Spec.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
		Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(`{"sharing":"timeSlicing"}`)}}}}}
	requireForbidden(t, "a template with a driver's configuration", create(configured), "only one request of exact devices of a DeviceClass")

	// A template of the tenant's own: the controller may not delete it.
	mine := ours()
	mine.Name, mine.OwnerReferences = "mine", nil
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	requireForbidden(t, "the delete of a template", templates.Delete(ctx, "mine", metav1.DeleteOptions{DryRun: dry}))
}
