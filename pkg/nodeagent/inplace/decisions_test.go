package inplace

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

func TestRunDecision(t *testing.T) {
	now := metav1.Now()
	run := func(phase v1alpha1.Phase, n int32, recs ...v1alpha1.AttemptRecord) *v1alpha1.TrainingRun {
		return &v1alpha1.TrainingRun{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm", UID: "run-uid"},
			Status:     v1alpha1.TrainingRunStatus{Phase: phase, Attempt: n, Attempts: recs},
		}
	}
	pod := func(attempt string, runUID string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm-0", Labels: map[string]string{
			v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: attempt,
		}}}
		if runUID != "" {
			p.Labels[v1alpha1.LabelRunUID] = runUID
		}
		return p
	}
	inPlace := func(n, job int32, opened bool) v1alpha1.AttemptRecord {
		r := v1alpha1.AttemptRecord{Attempt: n, RestartMode: v1alpha1.RestartModeInPlace, JobAttempt: job}
		if opened {
			r.BarrierOpenedAt = &now
		}
		return r
	}
	type want struct {
		attempt  int
		open, ok bool
	}
	for name, tc := range map[string]struct {
		run  *v1alpha1.TrainingRun
		pod  *corev1.Pod
		want want
	}{
		"first attempt: open at once": {
			run: run(v1alpha1.PhasePending, 1, v1alpha1.AttemptRecord{Attempt: 1}), pod: pod("1", "run-uid"),
			want: want{1, true, true},
		},
		"in place, decided, barrier closed: stop the old worker, hold": {
			run: run(v1alpha1.PhaseRestarting, 2, v1alpha1.AttemptRecord{Attempt: 1}, inPlace(2, 1, false)), pod: pod("1", "run-uid"),
			want: want{2, false, true},
		},
		"in place, barrier opened": {
			run: run(v1alpha1.PhasePending, 2, v1alpha1.AttemptRecord{Attempt: 1}, inPlace(2, 1, true)), pod: pod("1", "run-uid"),
			want: want{2, true, true},
		},
		"a moved index's new pod in the kept Job": {
			run: run(v1alpha1.PhaseRestarting, 3, inPlace(3, 1, false)), pod: pod("3", "run-uid"),
			want: want{3, false, true},
		},
		"a third in-place attempt, pod made for the second": {
			run: run(v1alpha1.PhasePending, 3, inPlace(3, 1, true)), pod: pod("2", "run-uid"),
			want: want{3, true, true},
		},
		// Recreated: a new Job for attempt 3; the old Job's pods are being deleted. The agent
		// must not stop them (their restart would open for attempt 3 beside the new pods).
		"recreated: an old Job's pod is left alone": {
			run: run(v1alpha1.PhaseRestarting, 3, v1alpha1.AttemptRecord{Attempt: 3, RestartMode: v1alpha1.RestartModeRecreate}), pod: pod("2", "run-uid"),
			want: want{0, false, false},
		},
		"recreated: the new Job's pod opens at once": {
			run: run(v1alpha1.PhasePending, 3, v1alpha1.AttemptRecord{Attempt: 3, RestartMode: v1alpha1.RestartModeRecreate}), pod: pod("3", "run-uid"),
			want: want{3, true, true},
		},
		"in place, a pod older than the kept Job": {
			run: run(v1alpha1.PhaseRestarting, 4, inPlace(4, 3, false)), pod: pod("2", "run-uid"),
			want: want{0, false, false},
		},
		"no record yet for the attempt: open (a new Job)": {
			run: run(v1alpha1.PhasePending, 1), pod: pod("1", "run-uid"),
			want: want{1, true, true},
		},
		"another run of the same name":   {run: run(v1alpha1.PhaseRunning, 1), pod: pod("1", "older-uid"), want: want{0, false, false}},
		"a pod without an attempt label": {run: run(v1alpha1.PhaseRunning, 1), pod: pod("", "run-uid"), want: want{0, false, false}},
		"the run ended":                  {run: run(v1alpha1.PhaseFailed, 2, inPlace(2, 1, false)), pod: pod("1", "run-uid"), want: want{0, false, false}},
		"the run is suspended":           {run: run(v1alpha1.PhaseSuspended, 2), pod: pod("2", "run-uid"), want: want{0, false, false}},
		"the run has not started":        {run: run("", 0), pod: pod("1", "run-uid"), want: want{0, false, false}},
		"no run":                         {run: nil, pod: pod("1", "run-uid"), want: want{0, false, false}},
	} {
		t.Run(name, func(t *testing.T) {
			n, open, ok := RunDecision(tc.run, tc.pod)
			if got := (want{n, open, ok}); got != tc.want {
				t.Errorf("RunDecision = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStoreDecisions(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	run := &v1alpha1.TrainingRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm", UID: "u"},
		Status: v1alpha1.TrainingRunStatus{Phase: v1alpha1.PhaseRunning, Attempt: 2}}
	if err := store.Add(run); err != nil {
		t.Fatal(err)
	}
	d := StoreDecisions{Runs: store}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm-0", Labels: map[string]string{
		v1alpha1.LabelRun: "llm", v1alpha1.LabelAttempt: "2", v1alpha1.LabelRunUID: "u"}}}
	if n, open, ok := d.For(p); n != 2 || !open || !ok {
		t.Errorf("For = %d, %v, %v; want 2, true, true", n, open, ok)
	}
	other := p.DeepCopy()
	other.Namespace = "other"
	if _, _, ok := d.For(other); ok {
		t.Error("a pod of a run the store does not hold got a decision")
	}
}
