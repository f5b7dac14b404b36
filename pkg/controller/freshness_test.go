package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/faultline-dev/faultline/api/scheme"
	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// lagging is the controller's client as the manager builds it: it writes to the API server
// and reads from a cache that may lag behind it.
type lagging struct {
	client.Client
	cache client.Reader
}

func (l *lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return l.cache.Get(ctx, key, obj, opts...)
}

// counting counts the live reads.
type counting struct {
	client.Reader
	gets int
}

func (c *counting) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestRunIsReadFromTheCacheOnlyAtAKnownVersion: a reconcile may act on a cached run only when
// the cache holds the version the controller last wrote or read live. A cache that lags
// behind the controller's own write is not acted on at all (the write's watch event brings
// the run back), and one ahead of what the controller knows (someone else changed the run)
// is bypassed for the API server, so no step is ever taken on a status older than the last
// one written.
func TestRunIsReadFromTheCacheOnlyAtAKnownVersion(t *testing.T) {
	ctx := context.Background()
	run := &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml", Generation: 1},
		Spec:       v1alpha1.TrainingRunSpec{Workers: 2, Framework: v1alpha1.FrameworkNone},
		Status:     v1alpha1.TrainingRunStatus{Attempt: 1, Phase: v1alpha1.PhaseRunning},
	}
	api := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(run).WithStatusSubresource(&v1alpha1.TrainingRun{}).Build()
	live := func() *v1alpha1.TrainingRun {
		got := &v1alpha1.TrainingRun{}
		if err := api.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cacheOf := func(r *v1alpha1.TrainingRun) client.Reader {
		return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(r.DeepCopy()).Build()
	}
	apiReader := &counting{Reader: api}
	cl := &lagging{Client: api, cache: cacheOf(live())}
	r := &Reconciler{Client: cl, APIReader: apiReader}
	key := client.ObjectKeyFromObject(run)
	read := func(step, wantSource string, wantAttempt int32) {
		t.Helper()
		before, counted := apiReader.gets, testutil.ToFloat64(runReads.WithLabelValues(wantSource))
		got := &v1alpha1.TrainingRun{}
		err := r.getRun(ctx, key, got)
		if wantSource == ReadDeferred {
			if !errors.Is(err, errCacheBehindOwnWrite) {
				t.Errorf("%s: got %v, want the read deferred to the write's event", step, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if isLive, wantLive := apiReader.gets > before, wantSource == ReadFromAPIServer; isLive != wantLive {
			t.Errorf("%s: read from the API server = %v, want %v", step, isLive, wantLive)
		}
		if n := testutil.ToFloat64(runReads.WithLabelValues(wantSource)) - counted; n != 1 {
			t.Errorf("%s: faultline_run_reads_total{source=%q} rose by %v, want 1", step, wantSource, n)
		}
		if wantSource != ReadDeferred && got.Status.Attempt != wantAttempt {
			t.Errorf("%s: read attempt %d, want %d", step, got.Status.Attempt, wantAttempt)
		}
	}
	write := func(attempt int32, phase v1alpha1.Phase) {
		t.Helper()
		written := live()
		written.Status.Attempt, written.Status.Phase = attempt, phase
		if err := r.writeStatus(ctx, written); err != nil {
			t.Fatal(err)
		}
	}

	read("first read of a run (a new process knows no version)", ReadFromAPIServer, 1)
	read("cache at the version read live", ReadFromCache, 1)

	// A restart decision is written; the cache has not seen it yet.
	beforeWrite := cacheOf(live())
	write(2, v1alpha1.PhaseRestarting)
	read("cache older than the controller's own write", ReadDeferred, 0)
	// A second write before the cache caught up with the first.
	afterFirst := cacheOf(live())
	write(2, v1alpha1.PhasePending)
	read("cache two of the controller's writes behind", ReadDeferred, 0)
	cl.cache = afterFirst
	read("cache one of the controller's writes behind", ReadDeferred, 0)
	cl.cache = cacheOf(live())
	read("cache caught up with the writes", ReadFromCache, 2)
	// Once the cache has shown the last write, an older version is no longer one it is
	// catching up from: something else is wrong, and the API server says what is true.
	cl.cache = beforeWrite
	read("cache back at a version it had passed", ReadFromAPIServer, 2)
	cl.cache = cacheOf(live())

	// Someone else changes the run: the cache is ahead of what the controller knows.
	changed := live()
	changed.Spec.Suspend = ptr.To(true)
	if err := api.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	cl.cache = cacheOf(live())
	read("cache newer than the version known", ReadFromAPIServer, 2)
	read("cache at the version read live again", ReadFromCache, 2)

	// A deleted run is forgotten: its next incarnation under the same name starts live.
	r.forget(key)
	read("after forget", ReadFromAPIServer, 2)
}
