package trust

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EControllerCannotUncordonOrRelabelNodes: the controller's RBAC lets it patch any
// Node (it cordons for a NodeMaintenance); the faultline-controller-nodes policy keeps that
// to setting spec.unschedulable to true. With the controller's own token, against the real
// API server: the cordon is admitted; an uncordon, a label, an annotation, a taint, a
// providerID and a delete are refused.
func TestE2EControllerCannotUncordonOrRelabelNodes(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	name := "cordon-" + ns
	if err := c.AddNode(ctx, name, cluster.DefaultNode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	asController := controllerClient(ctx, t, c)
	nodes := asController.CoreV1().Nodes()
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patch := func(p string) error {
		_, err := nodes.Patch(ctx, name, types.MergePatchType, []byte(p), dry)
		return err
	}

	// A policy takes effect some time after it is created, with nothing to watch: wait until
	// a relabel is refused (a dry run, so nothing changes either way).
	relabel := `{"metadata":{"labels":{"faultline.dev/forged":"x"}}}`
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return apierrors.IsForbidden(patch(relabel)), nil
	}); err != nil {
		t.Fatalf("the controller's relabel of a node was never refused: %v (last: %v)", err, patch(relabel))
	}

	// What it is for: the cordon, for real, so that the uncordon below undoes one.
	if _, err := nodes.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the controller's cordon of node %s: %v, want it admitted", name, err)
	}
	for _, tc := range []struct{ what, patch, says string }{
		{"uncordon", `{"spec":{"unschedulable":false}}`, "may not uncordon node " + name},
		{"uncordon by removing the field", `{"spec":{"unschedulable":null}}`, "may not uncordon node " + name},
		{"relabel", relabel, "may not change the labels, annotations, finalizers or owners of node " + name},
		{"annotate", `{"metadata":{"annotations":{"faultline.dev/shutdown-detected-at":"2026-01-01T00:00:00Z"}}}`, "may not change the labels, annotations"},
		{"taint", fmt.Sprintf(`{"spec":{"taints":[{"key":"faultline.dev/forged","effect":"%s"}]}}`, corev1.TaintEffectNoSchedule), "may not change the spec of node " + name + " other than its cordon"},
		{"providerID", `{"spec":{"providerID":"kwok://forged"}}`, "may not change the spec of node"},
	} {
		requireForbidden(t, "the controller's "+tc.what+" of node "+name, patch(tc.patch), tc.says)
	}
	err := nodes.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	requireForbidden(t, "the controller's delete of node "+name, err)

	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable || node.Labels["faultline.dev/forged"] != "" {
		t.Errorf("node %s after the refusals: unschedulable=%t labels=%v, want cordoned and unlabelled", name, node.Spec.Unschedulable, node.Labels)
	}
}
