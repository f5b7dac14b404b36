package controller

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestSyncedSinceDeletion: a deleted Job is let go only once the Job controller has written
// it since its deletion (no creation of an earlier sync can still be in flight), once it
// has finished, or once the Job controller's own expectations would have expired.
func TestSyncedSinceDeletion(t *testing.T) {
	deletedAt := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	version := func(rv string, deleted bool, conds ...batchv1.JobCondition) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "llm", UID: "job-1", ResourceVersion: rv, Finalizers: []string{v1alpha1.FinalizerAttemptJob}}}
		if deleted {
			j.DeletionTimestamp = &metav1.Time{Time: deletedAt}
		}
		j.Status.Conditions = conds
		return j
	}
	failed := batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}
	for name, tc := range map[string]struct {
		seen  []*batchv1.Job // the informer's versions, in order
		now   time.Duration  // after the deletion
		check *batchv1.Job
		want  bool
	}{
		"the deletion's own version": {
			seen: []*batchv1.Job{version("4", false), version("5", true)}, check: version("5", true),
		},
		"a status written since": {
			seen: []*batchv1.Job{version("4", false), version("5", true), version("6", true)}, check: version("6", true), want: true,
		},
		"a later version than the cache shows yet": {
			seen: []*batchv1.Job{version("5", true)}, check: version("7", true), want: true,
		},
		"no record (the process started after the deletion)": {
			check: version("6", true), now: time.Minute,
		},
		"no record, past the Job controller's expectations": {
			check: version("6", true), now: jobControllerExpectationsTimeout, want: true,
		},
		"no write since, past the Job controller's expectations": {
			seen: []*batchv1.Job{version("5", true)}, check: version("5", true), now: jobControllerExpectationsTimeout, want: true,
		},
		"finished": {
			seen: []*batchv1.Job{version("5", true, failed)}, check: version("5", true, failed), want: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(deletedAt.Add(tc.now))}
			for _, j := range tc.seen {
				r.deletions.saw(j)
			}
			if got := r.syncedSinceDeletion(tc.check); got != tc.want {
				t.Errorf("syncedSinceDeletion = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestJobDeletionsOnlyHeldJobs: only Jobs that faultline holds are remembered, and a Job is
// forgotten once let go.
func TestJobDeletionsOnlyHeldJobs(t *testing.T) {
	var d jobDeletions
	unheld := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "a", ResourceVersion: "1", DeletionTimestamp: &metav1.Time{}}}
	d.saw(unheld)
	unheld.ResourceVersion = "2"
	if d.writtenSince(unheld) || len(d.rvs) != 0 {
		t.Errorf("a Job without %s is remembered: %v", v1alpha1.FinalizerAttemptJob, d.rvs)
	}
	held := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "b", ResourceVersion: "1", DeletionTimestamp: &metav1.Time{}, Finalizers: []string{v1alpha1.FinalizerAttemptJob}}}
	d.saw(held)
	d.forget(held.UID)
	if len(d.rvs) != 0 {
		t.Errorf("a Job let go is remembered: %v", d.rvs)
	}
}
