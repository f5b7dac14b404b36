package heartbeat

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/agentlease"
	"github.com/faultline-dev/faultline/pkg/attempt"
)

// recordsFixture: n pods of node gpu-1 whose barrier is their worker's entrypoint, each
// recorded on its own as running attempt 1 in container c<i>, in the informer and the API
// server, and Records on gpu-1's heartbeat.
func recordsFixture(t *testing.T, n int) (*Records, *fakeLeases, []*corev1.Pod, cache.Indexer, *fake.Clientset) {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var pods []*corev1.Pod
	var objs []runtime.Object
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: fmt.Sprintf("w-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))},
			Spec: corev1.PodSpec{NodeName: "gpu-1"}}
		p = attempt.WithRecord(p, &v1alpha1.BarrierRecord{ContainerID: fmt.Sprintf("c%d", i), Attempt: 1})
		pods = append(pods, p)
		objs = append(objs, p)
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	api := &fakeLeases{leases: map[string]*coordinationv1.Lease{}, writes: make(chan struct{}, 1000)}
	client := fake.NewClientset(objs...)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hb := New(Config{Client: api, Node: "gpu-1", Logger: log})
	return NewRecords(hb, clientsetPods{client}, "gpu-1", corelisters.NewPodLister(indexer), log), api, pods, indexer, client
}

// clientsetPods lists the pods of a fake clientset.
type clientsetPods struct{ c *fake.Clientset }

func (k clientsetPods) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return k.c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
}

func leaseRecords(t *testing.T, api *fakeLeases) map[types.UID]v1alpha1.BarrierRecord {
	t.Helper()
	l, err := api.GetLease(context.Background(), agentlease.Namespace, "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	return agentlease.Records(l, "gpu-1")
}

// TestRecordsOnTheHeartbeat: the stops of a node's pods, asked for at once, are written on
// its heartbeat in fewer writes than pods (each waits for the write in flight, then all go
// in the next); the agent reads its pods with them (Lister), the pods themselves unchanged;
// an agent started again reads them back; a stop of another container, or said already,
// writes nothing new.
func TestRecordsOnTheHeartbeat(t *testing.T) {
	ctx := context.Background()
	const n = 16
	r, api, pods, indexer, _ := recordsFixture(t, n)
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the gather window (TestRecordsGatherANodesAsksInOneWrite), the first write
	// held until every stop is asked for: they wait for it, then go in one.
	r.gather = 0
	api.gate = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.RecordStopped(ctx, p, fmt.Sprintf("c%d", i), 2, nil)
		}()
	}
	for {
		r.mu.Lock()
		asked := len(r.pending) + r.inFlight
		r.mu.Unlock()
		if asked == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(api.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if writes := len(api.writes); writes != 2 {
		t.Errorf("%d writes of the Lease for %d stops asked for at once: want 2 (the first, and all the others together)", writes, n)
	}
	recs := leaseRecords(t, api)
	if len(recs) != n {
		t.Fatalf("%d records on the Lease, want %d: %v", len(recs), n, recs)
	}
	lister := r.Lister(corelisters.NewPodLister(indexer))
	for i, p := range pods {
		want := v1alpha1.BarrierRecord{ContainerID: fmt.Sprintf("c%d", i), Attempt: 1, StoppedFor: 2}
		if got := recs[p.UID]; got != want {
			t.Errorf("pod %s on the Lease: %+v, want %+v", p.Name, got, want)
		}
		read, err := lister.Pods("ml").Get(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := attempt.BarrierRecord(read); got == nil || *got != want {
			t.Errorf("pod %s read by the agent: %+v, want %+v", p.Name, got, want)
		}
		if own := attempt.BarrierRecord(p); own.StoppedFor != 0 {
			t.Errorf("pod %s's own record changed: %+v", p.Name, own)
		}
	}
	// Another container's stop, and a stop said already: nothing new.
	if err := r.RecordStopped(ctx, pods[0], "c-other", 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordStopped(ctx, r.Pod(pods[1]), "c1", 2, nil); err != nil {
		t.Fatal(err)
	}
	if got := leaseRecords(t, api); got[pods[0].UID].StoppedFor != 2 || got[pods[1].UID].StoppedFor != 2 {
		t.Errorf("records after stops that say nothing new: %v", got)
	}

	// An agent started again reads the records back.
	again := NewRecords(r.hb, r.kube, "gpu-1", corelisters.NewPodLister(indexer), r.log)
	again.hb = New(r.hb.cfg)
	if err := again.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := again.Record(pods[3].UID); got == nil || got.StoppedFor != 2 {
		t.Errorf("an agent started again reads pod w-3's record as %+v, want its stop for 2", got)
	}
}

// TestRecordsGatherANodesAsksInOneWrite: the opens of a node's pods, asked for within the
// gather window of the first, go in one write: one list of the node's pods to confirm them,
// one update of the Lease.
func TestRecordsGatherANodesAsksInOneWrite(t *testing.T) {
	ctx := context.Background()
	const n = 8
	r, api, pods, _, client := recordsFixture(t, n)
	clk := testclock.NewFakeClock(time.Now())
	r.hb.cfg.Clock = clk
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, p := range pods {
		wg.Go(func() {
			next := *attempt.BarrierRecord(p)
			next.Attempt = 2
			errs <- r.RecordBarrier(ctx, p, next)
		})
	}
	// Every open asked for, the write waiting out its window: then the window ends.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		asked := len(r.pending)
		r.mu.Unlock()
		if asked == n && clk.HasWaiters() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d opens pending, a write waiting for others: %v; want all %d pending while one waits", asked, n, clk.HasWaiters(), n)
		}
	}
	clk.Step(recordsGather)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if writes := len(api.writes); writes != 1 {
		t.Errorf("%d writes of the Lease for %d opens asked for together: want 1", writes, n)
	}
	lists := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("%d lists of the node's pods for %d opens asked for together: want 1", lists, n)
	}
	for _, p := range pods {
		if got := r.Record(p.UID); got == nil || got.Attempt != 2 {
			t.Errorf("pod %s's record: %+v, want attempt 2's", p.Name, got)
		}
	}
}

// TestRecordsOpenOnlyWhatTheAPIServerHas: an open is recorded only for a pod the API server
// still has, not being deleted, and only over the record it was decided on: an agent whose
// informer has not seen a pod's deletion never opens it, and a decision made on an earlier
// record conflicts (the loop reads the pod again). A record of a pod gone from the node is
// dropped at the next write.
func TestRecordsOpenOnlyWhatTheAPIServerHas(t *testing.T) {
	ctx := context.Background()
	r, api, pods, indexer, client := recordsFixture(t, 3)
	for i, p := range pods[:2] {
		if err := r.RecordStopped(ctx, p, fmt.Sprintf("c%d", i), 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	// w-1 deleted in the API server; the informer has not seen it.
	if err := client.CoreV1().Pods("ml").Delete(ctx, "w-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	open := func(p *corev1.Pod) error {
		read := r.Pod(p)
		next := *attempt.BarrierRecord(read)
		next.Attempt = 2
		return r.RecordBarrier(ctx, read, next)
	}
	if err := open(pods[0]); err != nil {
		t.Fatalf("open of w-0: %v", err)
	}
	if err := open(pods[1]); !apierrors.IsConflict(err) {
		t.Errorf("open of w-1, deleted in the API server: %v, want a conflict", err)
	}
	if got := r.Record(pods[1].UID); got == nil || got.Attempt != 1 {
		t.Errorf("w-1's record after its refused open: %+v, want attempt 1's", got)
	}
	// A decision made on w-0's record before its open: a conflict.
	stale := *attempt.BarrierRecord(r.Pod(pods[0]))
	stale.Attempt, stale.StoppedFor = 1, 2
	if err := r.RecordBarrier(ctx, attempt.WithRecord(pods[0], &stale), v1alpha1.BarrierRecord{ContainerID: "c0", Attempt: 3}); !apierrors.IsConflict(err) {
		t.Errorf("an open decided on an earlier record: %v, want a conflict", err)
	}
	// w-1 leaves the informer: its record goes with the next write.
	if err := indexer.Delete(pods[1]); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordStopped(ctx, pods[2], "c2", 2, nil); err != nil {
		t.Fatal(err)
	}
	recs := leaseRecords(t, api)
	if _, ok := recs[pods[1].UID]; ok || len(recs) != 2 || recs[pods[0].UID].Attempt != 2 {
		t.Errorf("records %v: want w-0 opened for 2, w-2 stopped, w-1 dropped", recs)
	}
}
