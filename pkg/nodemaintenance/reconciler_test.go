package nodemaintenance

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// lagging reads from a cache that has not seen every write yet, and writes to the API
// server, as the manager's client does.
type lagging struct {
	client.Client // the API server
	cache         client.Reader
}

func (l lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return l.cache.Get(ctx, key, obj, opts...)
}

func (l lagging) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.cache.List(ctx, list, opts...)
}

func newFake(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.New()).
		WithIndex(&corev1.Pod{}, PodsByNode, nodeOfPod).
		WithStatusSubresource(&v1alpha1.NodeMaintenance{}).
		WithObjects(objs...).Build()
}

// TestOwnCordonUnseenIsNoUncordon: the write of the plan wakes the reconciler again before
// the cache has the Node with its cordon (in CI: cordoned and "uncordoned" in the same
// second, the maintenance Completed before a worker moved). A node schedulable in the cache
// after our cordon is uncordoned only if the API server says so.
func TestOwnCordonUnseenIsNoUncordon(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 3, 14, 33, 52, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-node-1"}}
	nm := &v1alpha1.NodeMaintenance{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-1"},
		Spec:       v1alpha1.NodeMaintenanceSpec{Nodes: []string{node.Name}, Reason: "firmware"},
	}
	api := newFake(node.DeepCopy(), nm)
	m := &Reconciler{Client: api, APIReader: api, Recorder: events.NewFakeRecorder(100), Clock: clocktesting.NewFakePassiveClock(t0)}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(nm)}
	if _, err := m.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.NodeMaintenance{}
	if err := api.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	cordoned := &corev1.Node{}
	if err := api.Get(ctx, client.ObjectKeyFromObject(node), cordoned); err != nil || !cordoned.Spec.Unschedulable {
		t.Fatalf("node %s not cordoned by the first reconcile (%v)", node.Name, err)
	}

	// The cache has the maintenance as written, and the node as it was before the cordon.
	m.Client = lagging{Client: api, cache: newFake(node.DeepCopy(), got.DeepCopy())}
	if _, err := m.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if st := got.Status.Nodes[0]; st.UncordonedAt != nil || got.Status.Phase == v1alpha1.MaintenanceCompleted {
		t.Fatalf("after a reconcile on a cache without its own cordon: phase %s, node %+v; want the node still under maintenance", got.Status.Phase, st)
	}

	// The SRE uncordons: the API server says so, whatever the cache holds.
	cordoned.Spec.Unschedulable = false
	if err := api.Update(ctx, cordoned); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if st := got.Status.Nodes[0]; st.UncordonedAt == nil || got.Status.Phase != v1alpha1.MaintenanceCompleted {
		t.Fatalf("after the SRE's uncordon: phase %s, node %+v; want Completed with uncordonedAt", got.Status.Phase, st)
	}
}
