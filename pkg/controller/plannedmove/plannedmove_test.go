package plannedmove

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/maintenance"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// TestPlanMovesOffCordonedNodes: a gang with workers on a cordoned node moves off it, its
// root the lowest index there; a node whose NodeMaintenance has not planned the run yet
// makes it wait; once the cordon is gone, the node's exclusion is lifted, as is a gone
// node's, and a node still cordoned stays kept off.
func TestPlanMovesOffCordonedNodes(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	node := func(name string, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	worker := func(i int, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "llm-" + string(rune('0'+i)), Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": string(rune('0' + i))}},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"}, Status: v1alpha1.TrainingRunStatus{Attempt: 1}}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(node("a", false), node("b", true)).Build()
	p := &Planner{Client: cl, Maintenance: maintenance.DefaultConfig(), Clock: clocktesting.NewFakePassiveClock(now)}

	mv, err := p.Plan(ctx, run, []*corev1.Pod{worker(0, "a"), worker(3, "b"), worker(2, "b")})
	if err != nil {
		t.Fatal(err)
	}
	if len(mv.Nodes) != 1 || mv.Nodes[0] != "b" || mv.Root.Name != "llm-2" || mv.Wait || mv.Blocked != "" {
		t.Fatalf("move %+v (root %s), want off node b, rooted at index 2", mv, mv.Root.Name)
	}
	v := mv.Verdict(run, policy.Decision{Rule: "default-planned-maintenance", Action: v1alpha1.ActionRestartRun}, metav1.NewTime(now))
	if v.Cause != v1alpha1.CausePlannedMaintenance || *v.Index != 2 || v.Node != "b" || !strings.Contains(v.Explanation, "moves off that node") || !strings.Contains(v.Explanation, "untouched") {
		t.Errorf("verdict %+v", v)
	}

	// A NodeMaintenance that holds node b and has not planned the run: wait for its plan.
	nm := &v1alpha1.NodeMaintenance{ObjectMeta: metav1.ObjectMeta{Name: "drain-b"}, Spec: v1alpha1.NodeMaintenanceSpec{Nodes: []string{"b"}}}
	if err := cl.Create(ctx, nm); err != nil {
		t.Fatal(err)
	}
	if mv, err := p.Plan(ctx, run, []*corev1.Pod{worker(0, "a"), worker(2, "b")}); err != nil || !mv.Wait || len(mv.Nodes) != 0 {
		t.Errorf("under an unplanned NodeMaintenance: move %+v (%v), want a wait", mv, err)
	}

	// The maintenance over: b is lifted, and so is a node that is gone; c stays kept off.
	if err := cl.Delete(ctx, nm); err != nil {
		t.Fatal(err)
	}
	b := node("b", false)
	if err := cl.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, node("c", true)); err != nil {
		t.Fatal(err)
	}
	run.Status.MaintenanceExcludedNodes = []string{"b", "c", "gone"}
	kept, lifted, err := p.Lift(ctx, run)
	if err != nil || strings.Join(lifted, ",") != "b,gone" || strings.Join(kept, ",") != "c" {
		t.Errorf("lift: kept %v lifted %v (%v), want c kept, b and gone lifted", kept, lifted, err)
	}
}
