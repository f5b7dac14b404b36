package policy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

var (
	shutdown = Failure{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseNodeShutdown, Node: "n1"}
	gpu      = Failure{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CauseGPUFault, Node: "n2"}
	appExit  = Failure{Class: v1alpha1.ClassApplication, Cause: v1alpha1.CauseAppExit, Node: "n3"}
	unknown  = Failure{Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseUnknown, Node: "n4"}
	planned  = Failure{Class: v1alpha1.ClassInfrastructure, Cause: v1alpha1.CausePlannedMaintenance, Node: "n5"}
	stalled  = Failure{Class: v1alpha1.ClassUnknown, Cause: v1alpha1.CauseNoProgress, Node: "n6"}
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	first := []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: &metav1.Time{Time: t0}}}
	cases := map[string]struct {
		in   Input
		want Decision
	}{
		"infrastructure restarts by default and spends its budget": {
			in:   Input{Failure: shutdown, History: first, FailedAt: t0.Add(time.Hour)},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultInfrastructure, SpendsBudget: true},
		},
		"a GPU fault excludes its node by default": {
			in:   Input{Failure: gpu, History: first, FailedAt: t0.Add(time.Hour)},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultInfrastructure, SpendsBudget: true, ExcludeNode: "n2"},
		},
		"application fails the run by default": {
			in:   Input{Failure: appExit, History: first},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: RuleDefaultApplication},
		},
		"unknown restarts on its own budget": {
			in:   Input{Failure: unknown, History: first, Restarts: v1alpha1.RestartCounts{Infrastructure: 10}},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultUnknown, SpendsBudget: true},
		},
		"unknown budget exhausted fails the run": {
			in:   Input{Failure: unknown, History: first, Restarts: v1alpha1.RestartCounts{Unknown: 1}},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: RuleDefaultUnknown, BudgetExhausted: true},
		},
		"infrastructure budget from the spec": {
			in: Input{
				Failure: shutdown, History: first, Restarts: v1alpha1.RestartCounts{Infrastructure: 2},
				Policy: v1alpha1.FailurePolicy{MaxRestarts: v1alpha1.RestartBudgets{Infrastructure: ptr.To[int32](2)}},
			},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: RuleDefaultInfrastructure, BudgetExhausted: true},
		},
		"application restarts when the user allows it": {
			in: Input{
				Failure: appExit, History: first,
				Policy: v1alpha1.FailurePolicy{
					MaxRestarts: v1alpha1.RestartBudgets{Application: ptr.To[int32](3)},
					Rules:       []v1alpha1.FailurePolicyRule{{Name: "retry-bugs", OnClasses: []v1alpha1.Class{v1alpha1.ClassApplication}, Action: v1alpha1.ActionRestartRun}},
				},
			},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: "retry-bugs", SpendsBudget: true},
		},
		"first matching user rule wins and may exclude the node": {
			in: Input{
				Failure: gpu, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{
					{Name: "no-match", OnCauses: []v1alpha1.Cause{v1alpha1.CauseOOMKilled}, Action: v1alpha1.ActionFailRun},
					{Name: "bad-gpu", OnCauses: []v1alpha1.Cause{v1alpha1.CauseGPUFault}, Action: v1alpha1.ActionRestartRunIgnoreBudget, ExcludeNode: true},
					{Name: "later", Action: v1alpha1.ActionFailRun},
				}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRunIgnoreBudget, Rule: "bad-gpu", ExcludeNode: "n2"},
		},
		"ignore-budget restarts even with no budget left": {
			in: Input{
				Failure: shutdown, History: first, Restarts: v1alpha1.RestartCounts{Infrastructure: 10},
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{Name: "maint", OnCauses: []v1alpha1.Cause{v1alpha1.CauseNodeShutdown}, Action: v1alpha1.ActionRestartRunIgnoreBudget}}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRunIgnoreBudget, Rule: "maint"},
		},
		"a rule needs all of its criteria": {
			in: Input{
				Failure: shutdown, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{
					Name: "both", OnCauses: []v1alpha1.Cause{v1alpha1.CauseNodeShutdown}, OnClasses: []v1alpha1.Class{v1alpha1.ClassApplication}, Action: v1alpha1.ActionFailRun,
				}}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultInfrastructure, SpendsBudget: true},
		},
		"a planned maintenance spends no budget and never waits": {
			in: Input{
				Failure: planned, Restarts: v1alpha1.RestartCounts{Infrastructure: 10}, FailedAt: t0.Add(time.Minute),
				// A restarted attempt that lived a minute: a failure now would back off.
				History: []v1alpha1.AttemptRecord{{Attempt: 1, StartTime: &metav1.Time{Time: t0}, Outcome: OutcomeRestarted}, {Attempt: 2, StartTime: &metav1.Time{Time: t0}}},
				Policy:  v1alpha1.FailurePolicy{Backoff: v1alpha1.Backoff{InitialSeconds: 5, MaxSeconds: 300, ResetAfterSeconds: 600}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRunIgnoreBudget, Rule: RuleDefaultPlannedMaintenance},
		},
		"rules for failures never catch a planned maintenance": {
			in: Input{
				Failure: planned, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{
					{Name: "infra", OnClasses: []v1alpha1.Class{v1alpha1.ClassInfrastructure}, Action: v1alpha1.ActionRestartRun},
					{Name: "all", Action: v1alpha1.ActionFailRun},
				}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRunIgnoreBudget, Rule: RuleDefaultPlannedMaintenance},
		},
		"a rule that names PlannedMaintenance makes it spend budget": {
			in: Input{
				Failure: planned, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{Name: "count-drains", OnCauses: []v1alpha1.Cause{v1alpha1.CausePlannedMaintenance}, Action: v1alpha1.ActionRestartRun}}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: "count-drains", SpendsBudget: true},
		},
		"a gang without progress restarts on its own budget, whatever unknown has spent": {
			in:   Input{Failure: stalled, History: first, Restarts: v1alpha1.RestartCounts{Unknown: 1}},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultNoProgress, SpendsBudget: true},
		},
		"a gang without progress fails the run once its budget is spent": {
			in:   Input{Failure: stalled, History: first, Restarts: v1alpha1.RestartCounts{NoProgress: 1}},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: RuleDefaultNoProgress, BudgetExhausted: true},
		},
		"the noProgress budget from the spec": {
			in: Input{
				Failure: stalled, History: first, Restarts: v1alpha1.RestartCounts{NoProgress: 2},
				Policy: v1alpha1.FailurePolicy{MaxRestarts: v1alpha1.RestartBudgets{NoProgress: ptr.To[int32](3), Unknown: ptr.To[int32](0)}},
			},
			want: Decision{Action: v1alpha1.ActionRestartRun, Rule: RuleDefaultNoProgress, SpendsBudget: true},
		},
		"a rule for the Unknown class catches a gang without progress, on the NoProgress budget": {
			in: Input{
				Failure: stalled, History: first, Restarts: v1alpha1.RestartCounts{NoProgress: 1},
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{Name: "unknowns", OnClasses: []v1alpha1.Class{v1alpha1.ClassUnknown}, Action: v1alpha1.ActionRestartRun}}},
			},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: "unknowns", BudgetExhausted: true},
		},
		"a rule may fail the run on NoProgress": {
			in: Input{
				Failure: stalled, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{Name: "hangs-are-bugs", OnCauses: []v1alpha1.Cause{v1alpha1.CauseNoProgress}, Action: v1alpha1.ActionFailRun}}},
			},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: "hangs-are-bugs"},
		},
		"a fail rule never excludes a node": {
			in: Input{
				Failure: gpu, History: first,
				Policy: v1alpha1.FailurePolicy{Rules: []v1alpha1.FailurePolicyRule{{Name: "stop", Action: v1alpha1.ActionFailRun, ExcludeNode: true}}},
			},
			want: Decision{Action: v1alpha1.ActionFailRun, Rule: "stop"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Decide(tc.in)
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "Reason")); diff != "" {
				t.Errorf("Decide() mismatch (-want +got):\n%s", diff)
			}
			if got.Reason == "" {
				t.Error("Decide() gave no reason")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	b := v1alpha1.Backoff{InitialSeconds: 5, MaxSeconds: 30, ResetAfterSeconds: 600}
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	// attempts builds a history of attempts that each started at starts[i] and (but the
	// last) ended in a restart 10 s later.
	attempts := func(outcome string, starts ...time.Duration) []v1alpha1.AttemptRecord {
		var h []v1alpha1.AttemptRecord
		for i, s := range starts {
			r := v1alpha1.AttemptRecord{Attempt: int32(i + 1), StartTime: at(s)}
			if i < len(starts)-1 {
				r.EndTime, r.Outcome = at(s+10*time.Second), outcome
			}
			h = append(h, r)
		}
		return h
	}
	cases := map[string]struct {
		history  []v1alpha1.AttemptRecord
		failedAt time.Duration
		want     time.Duration
	}{
		"first attempt restarts at once":                  {attempts(OutcomeRestarted, 0), 5 * time.Second, 0},
		"a restart that lived long restarts at once":      {attempts(OutcomeRestarted, 0, 20*time.Second), time.Hour, 0},
		"a short-lived restart waits initialSeconds":      {attempts(OutcomeRestarted, 0, 20*time.Second), 30 * time.Second, 5 * time.Second},
		"two in a row double":                             {attempts(OutcomeRestarted, 0, 20*time.Second, 40*time.Second), 50 * time.Second, 10 * time.Second},
		"three in a row double again":                     {attempts(OutcomeRestarted, 0, 20*time.Second, 40*time.Second, 60*time.Second), 70 * time.Second, 20 * time.Second},
		"the doubling is capped at maxSeconds":            {attempts(OutcomeRestarted, 0, 20*time.Second, 40*time.Second, 60*time.Second, 80*time.Second, 100*time.Second), 110 * time.Second, 30 * time.Second},
		"after a suspend the first failure costs nothing": {attempts(OutcomeSuspended, 0, 20*time.Second), 30 * time.Second, 0},
		"a long-lived attempt in the chain ends the streak": {
			history: []v1alpha1.AttemptRecord{
				{Attempt: 1, StartTime: at(0), EndTime: at(10 * time.Second), Outcome: OutcomeRestarted},
				{Attempt: 2, StartTime: at(20 * time.Second), EndTime: at(2 * time.Hour), Outcome: OutcomeRestarted},
				{Attempt: 3, StartTime: at(2*time.Hour + 5*time.Second)},
			},
			failedAt: 2*time.Hour + 10*time.Second, want: 5 * time.Second,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Backoff(b, tc.history, t0.Add(tc.failedAt)); got != tc.want {
				t.Errorf("Backoff() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSpend(t *testing.T) {
	r := Spend(Spend(Spend(v1alpha1.RestartCounts{}, v1alpha1.ClassInfrastructure), v1alpha1.ClassApplication), v1alpha1.ClassUnknown)
	if diff := cmp.Diff(v1alpha1.RestartCounts{Infrastructure: 1, Application: 1, Unknown: 1}, r); diff != "" {
		t.Errorf("Spend mismatch (-want +got):\n%s", diff)
	}
	r = SpendLine(r, LineOf(v1alpha1.ClassUnknown, v1alpha1.CauseNoProgress))
	if diff := cmp.Diff(v1alpha1.RestartCounts{Infrastructure: 1, Application: 1, Unknown: 1, NoProgress: 1}, r); diff != "" {
		t.Errorf("SpendLine(NoProgress) mismatch (-want +got):\n%s", diff)
	}
}

// The reasons name the line a restart spent, NoProgress's own too.
func TestReasonNamesTheBudgetLine(t *testing.T) {
	first := []v1alpha1.AttemptRecord{{Attempt: 1}}
	if got := Decide(Input{Failure: stalled, History: first}).Reason; got != "rule default-no-progress restarts the run on NoProgress: NoProgress restart 1 of 1" {
		t.Errorf("reason %q", got)
	}
	if got := Decide(Input{Failure: stalled, History: first, Restarts: v1alpha1.RestartCounts{NoProgress: 1}}).Reason; got != "NoProgress restart budget exhausted (1 of 1 spent); rule default-no-progress wanted a restart on NoProgress" {
		t.Errorf("reason %q", got)
	}
}
