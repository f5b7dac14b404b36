package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/policy"
)

// TestTransitionTellsEachChangeOnce: the events and counts of a restart, a failure, a success
// and a suspension come from the status writes that persisted them, once each: a later write
// that changes something else tells nothing of them again, and a write that forgets the
// oldest exclusions names them.
func TestTransitionTellsEachChangeOnce(t *testing.T) {
	ctx := context.Background()
	r, _ := newTracedReconciler()
	rec := events.NewFakeRecorder(100)
	r.Recorder = rec
	drain := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	restarts := func() float64 {
		return testutil.ToFloat64(restartsTotal.WithLabelValues(string(v1alpha1.ClassInfrastructure), string(v1alpha1.CauseNodeShutdown)))
	}

	// A restart persisted: one Warning that quotes the rule's reason, one count.
	run := makeRun("llm", 4).obj()
	run.Status.ExcludedNodes = []string{"old-1", "old-2", "kept"}
	before := run.Status.DeepCopy()
	counted := restarts()
	makeRunFrom(run).failed(shutdownVerdict(at(170)), nil)
	run.Status.ExcludedNodes = []string{"kept", "gpu-node-4"}
	meta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRestarting, Status: metav1.ConditionTrue, Reason: "NodeShutdown", Message: "rule default-infrastructure restarts the run on NodeShutdown: Infrastructure restart 1 of 10"})
	r.transitioned(ctx, run, before, run.Status.DeepCopy())
	got := drain()
	if len(got) != 2 || !strings.Contains(got[0], "ExclusionsForgotten") || !strings.Contains(got[0], "(old-1, old-2)") ||
		!strings.HasPrefix(got[1], "Warning NodeShutdown attempt 1 failed, starting attempt 2: rule default-infrastructure restarts the run on NodeShutdown: Infrastructure restart 1 of 10.") {
		t.Errorf("restart persisted: events %q, want the forgotten exclusions, then the restart with the rule's reason", got)
	}
	if n := restarts() - counted; n != 1 {
		t.Errorf("restart persisted: %v restarts counted, want 1", n)
	}

	// The next write (the teardown's progress) tells nothing of the restart again.
	before = run.Status.DeepCopy()
	run.Status.ReadyWorkers = 3
	r.transitioned(ctx, run, before, run.Status.DeepCopy())
	if got := drain(); len(got) != 0 || restarts()-counted != 1 {
		t.Errorf("a later write: events %q and %v restarts, want none and still 1", got, restarts()-counted)
	}

	// Attempt 2 succeeds: a Normal event.
	before = run.Status.DeepCopy()
	endAttempt(run, metav1.NewTime(at(9000)), nil, policy.OutcomeSucceeded)
	r.transitioned(ctx, run, before, run.Status.DeepCopy())
	if got := drain(); len(got) != 1 || got[0] != "Normal JobCompleted run succeeded in attempt 2" {
		t.Errorf("success persisted: events %q", got)
	}

	// A failure persisted: the rule's reason, read back from the verdict, or the exhausted
	// budget that the Failed condition's message starts with.
	for _, tc := range []struct{ message, want string }{
		{"worker 1 exited 1", "Warning AppExit run failed (rule default-application fails the run on AppExit (Application)): worker 1 exited 1"},
		{"Application restart budget exhausted (0 of 0 spent); rule app wanted a restart on AppExit. worker 1 exited 1",
			"Warning AppExit run failed (Application restart budget exhausted (0 of 0 spent); rule app wanted a restart on AppExit): worker 1 exited 1"},
	} {
		failed := makeRun("app", 2).obj()
		before = failed.Status.DeepCopy()
		v := shutdownVerdict(at(100))
		v.Class, v.Cause, v.Action, v.Rule, v.Explanation = v1alpha1.ClassApplication, v1alpha1.CauseAppExit, v1alpha1.ActionFailRun, "default-application", "worker 1 exited 1"
		makeRunFrom(failed).failed(v, nil)
		meta.SetStatusCondition(&failed.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: "AppExit", Message: tc.message})
		r.transitioned(ctx, failed, before, failed.Status.DeepCopy())
		if got := drain(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("failure persisted (condition %q): events %q, want %q", tc.message, got, tc.want)
		}
	}

	// A suspension persisted: by whom, with the condition's reason.
	suspended := makeRun("paused", 2).obj()
	before = suspended.Status.DeepCopy()
	endAttempt(suspended, metav1.NewTime(at(50)), nil, policy.OutcomeSuspended)
	currentRecord(suspended).Suspension = "spec.suspend"
	meta.SetStatusCondition(&suspended.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSuspended})
	r.transitioned(ctx, suspended, before, suspended.Status.DeepCopy())
	if got := drain(); len(got) != 1 || got[0] != "Normal Suspended attempt 1 suspended by spec.suspend; no restart is counted" {
		t.Errorf("suspension persisted: events %q", got)
	}
}

// makeRunFrom wraps an existing run in the test builder.
func makeRunFrom(run *v1alpha1.TrainingRun) *runBuilder { return &runBuilder{r: run} }
