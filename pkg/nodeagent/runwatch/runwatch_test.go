package runwatch

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// fakeRuns serves runs by their field selector, as the API server does, and records which
// watches are open.
type fakeRuns struct {
	mu      sync.Mutex
	runs    []v1alpha1.TrainingRun
	lists   []string
	watches map[string]*watch.FakeWatcher
}

func (f *fakeRuns) ListTrainingRuns(_ context.Context, o metav1.ListOptions) (*v1alpha1.TrainingRunList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, o.FieldSelector)
	sel, err := fields.ParseSelector(o.FieldSelector)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.TrainingRunList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, r := range f.runs {
		if sel.Matches(fields.Set{"metadata.namespace": r.Namespace, "metadata.name": r.Name}) {
			out.Items = append(out.Items, r)
		}
	}
	return out, nil
}

func (f *fakeRuns) WatchTrainingRuns(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := watch.NewFake()
	f.watches[o.FieldSelector] = w
	return w, nil
}

// IsWatchListSemanticsUnSupported: the fake's watches send no initial events.
func (f *fakeRuns) IsWatchListSemanticsUnSupported() bool { return true }

// open are the field selectors of the watches not stopped.
func (f *fakeRuns) open() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for sel, w := range f.watches {
		if !w.IsStopped() {
			out = append(out, sel)
		}
	}
	slices.Sort(out)
	return out
}

func run(ns, name string, attempt int32) v1alpha1.TrainingRun {
	return v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"}, Status: v1alpha1.TrainingRunStatus{Attempt: attempt}}
}

func pod(ns, name, runName string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.LabelRun: runName}}}
}

// TestSetWatchesTheRunsOfTheNodesPods: the Set watches each run that has a pod in the
// store, by its namespace and name alone, from its first pod to its last; a run with no pod
// on the node is never read; the probe reads no run.
func TestSetWatchesTheRunsOfTheNodesPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := &fakeRuns{runs: []v1alpha1.TrainingRun{run("ml", "a", 2), run("ml", "b", 1), run("other", "a", 7)}, watches: map[string]*watch.FakeWatcher{}}
	if err := Probe(ctx, runs); err != nil {
		t.Fatal(err)
	}
	if got, _ := runs.ListTrainingRuns(ctx, metav1.ListOptions{FieldSelector: Selector("", "")}); len(got.Items) != 0 {
		t.Fatalf("the probe's selector matches %d runs, want none", len(got.Items))
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	a0, a1 := pod("ml", "a-0", "a"), pod("ml", "a-1", "a")
	for _, p := range []*corev1.Pod{a0, a1, {ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "plain"}}} {
		_ = store.Add(p)
	}
	changes := make(chan string, 10)
	s := New(runs, store, nil, func(ns, name string) { changes <- ns + "/" + name }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := s.Handler()
	if err := s.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := s.watched(), []string{"ml/a"}; !slices.Equal(got, want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
	obj, ok, _ := s.GetByKey("ml/a")
	if r, isRun := obj.(*v1alpha1.TrainingRun); !ok || !isRun || r.Status.Attempt != 2 {
		t.Fatalf("ml/a from the Set: %v %v, want the run at attempt 2", obj, ok)
	}
	if _, ok, _ := s.GetByKey("ml/b"); ok {
		t.Error("ml/b, with no pod on the node, is in the Set")
	}
	if got := <-changes; got != "ml/a" {
		t.Errorf("change %s, want ml/a", got)
	}

	// A pod of b arrives: b is watched, by its name alone.
	b0 := pod("ml", "b-0", "b")
	_ = store.Add(b0)
	h.OnAdd(b0, false)
	waitFor(t, "b's watch", func() bool { return slices.Equal(runs.open(), []string{Selector("ml", "a"), Selector("ml", "b")}) })
	// a's pods go, one after the other: its watch ends with the last.
	_ = store.Delete(a0)
	h.OnDelete(a0)
	if got := s.watched(); !slices.Equal(got, []string{"ml/a", "ml/b"}) {
		t.Errorf("with one pod of a left: watched %v", got)
	}
	_ = store.Delete(a1)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ml/a-1", Obj: a1})
	if got := s.watched(); !slices.Equal(got, []string{"ml/b"}) {
		t.Errorf("a's last pod gone: watched %v, want ml/b", got)
	}
	waitFor(t, "a's watch to stop", func() bool { return slices.Equal(runs.open(), []string{Selector("ml", "b")}) })
	for _, sel := range runs.lists {
		if sel != Selector("", "") && sel != Selector("ml", "a") && sel != Selector("ml", "b") {
			t.Errorf("a list with field selector %q: every read names one run of the node's pods", sel)
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
