// Package policy turns a verdict on a failed attempt into a decision, following the run's
// failure policy (shared/DESIGN.md): user rules first, first match wins, then the defaults;
// a restart spends the budget of the failure's class unless the rule says otherwise; an
// exhausted budget fails the run (a gang that stopped making progress has a budget of its
// own: LineOf). It is pure: inputs in, decision out.
package policy

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// Defaults of the failure policy, for specs that bypassed the CRD's defaulting (e.g. built
// in Go). They equal the CRD defaults.
const (
	DefaultMaxInfrastructure = 10
	DefaultMaxApplication    = 0
	DefaultMaxUnknown        = 1
	DefaultMaxNoProgress     = 1
	DefaultSettleSeconds     = 1
)

// Rule names of the default rules, as they appear in status and events.
const (
	RuleDefaultInfrastructure = "default-infrastructure"
	RuleDefaultApplication    = "default-application"
	RuleDefaultUnknown        = "default-unknown"
	// RuleDefaultPlannedMaintenance is the default rule of CausePlannedMaintenance: a planned
	// move is not a failure, so it spends no budget.
	RuleDefaultPlannedMaintenance = "default-planned-maintenance"
	// RuleDefaultNoProgress is the default rule of CauseNoProgress: a gang that stopped
	// making progress restarts, on its own budget (maxRestarts.noProgress).
	RuleDefaultNoProgress = "default-no-progress"
)

// Failure is what Decide needs to know about the failure: its class, cause and node.
type Failure struct {
	Class v1alpha1.Class
	Cause v1alpha1.Cause
	Node  string
}

// Input is everything a decision depends on.
type Input struct {
	Policy   v1alpha1.FailurePolicy
	Restarts v1alpha1.RestartCounts
	// History is the run's attempts so far, oldest first; its last entry is the attempt
	// that failed (its StartTime set, its end not yet recorded).
	History []v1alpha1.AttemptRecord
	Failure Failure
	// FailedAt is when the failed attempt's root pod failed.
	FailedAt time.Time
}

// Decision is what to do about a failed attempt.
type Decision struct {
	// Action is RestartRun, RestartRunIgnoreBudget or FailRun.
	Action v1alpha1.Action
	// Rule names the rule that matched.
	Rule string
	// SpendsBudget is true when the restart counts against the class's budget.
	SpendsBudget bool
	// BudgetExhausted is true when the rule wanted a restart but the class has none left.
	BudgetExhausted bool
	// ExcludeNode is a node later attempts must avoid ("" for none).
	ExcludeNode string
	// Backoff is how long to wait before the next attempt starts.
	Backoff time.Duration
	// Reason is one line for events and logs.
	Reason string
}

// Decide applies the failure policy.
func Decide(in Input) Decision {
	rule := match(in.Policy.Rules, in.Failure)
	d := Decision{Action: rule.Action, Rule: rule.Name}
	if rule.ExcludeNode && in.Failure.Node != "" {
		d.ExcludeNode = in.Failure.Node
	}
	switch d.Action {
	case v1alpha1.ActionFailRun:
		d.Reason = FailRunReason(rule.Name, in.Failure.Cause, in.Failure.Class)
		d.ExcludeNode = ""
		return d
	case v1alpha1.ActionRestartRun:
		line := LineOf(in.Failure.Class, in.Failure.Cause)
		used, limit := LineSpent(in.Restarts, line), LineBudget(in.Policy.MaxRestarts, line)
		if used >= limit {
			return Decision{
				Action: v1alpha1.ActionFailRun, Rule: rule.Name, BudgetExhausted: true,
				Reason: fmt.Sprintf("%s restart budget exhausted (%d of %d spent); rule %s wanted a restart on %s",
					line, used, limit, rule.Name, in.Failure.Cause),
			}
		}
		d.SpendsBudget = true
		d.Reason = fmt.Sprintf("rule %s restarts the run on %s: %s restart %d of %d", rule.Name, in.Failure.Cause, line, used+1, limit)
	default: // RestartRunIgnoreBudget
		d.Reason = fmt.Sprintf("rule %s restarts the run on %s without spending budget", rule.Name, in.Failure.Cause)
	}
	if in.Failure.Cause != v1alpha1.CausePlannedMaintenance {
		// A planned move is chosen, not a crash loop: it waits for nothing.
		d.Backoff = Backoff(in.Policy.Backoff, in.History, in.FailedAt)
	}
	return d
}

// FailRunReason is a FailRun decision's reason when the rule itself fails the run (not a
// budget exhausted): read back from a persisted verdict (its rule, cause and class) too.
func FailRunReason(rule string, cause v1alpha1.Cause, class v1alpha1.Class) string {
	return fmt.Sprintf("rule %s fails the run on %s (%s)", rule, cause, class)
}

// match returns the first user rule that matches, else the default rule of the class.
// A rule matches when every criterion it sets matches; a rule that sets none matches all.
//
// A planned maintenance matches only a rule that names its cause: it is no failure, so rules
// written for failures (by class, or for all) never turn a drain into spent budget.
func match(rules []v1alpha1.FailurePolicyRule, f Failure) v1alpha1.FailurePolicyRule {
	for _, r := range rules {
		if f.Cause == v1alpha1.CausePlannedMaintenance && len(r.OnCauses) == 0 {
			continue
		}
		if len(r.OnCauses) > 0 && !slices.Contains(r.OnCauses, f.Cause) {
			continue
		}
		if len(r.OnClasses) > 0 && !slices.Contains(r.OnClasses, f.Class) {
			continue
		}
		return r
	}
	return defaultRule(f)
}

// defaultRule: infrastructure and unknown failures restart, application failures fail the
// run. A GPU that threw a fatal fault keeps the next attempt off its node by default: the
// node agent has also tainted or marked it, but a restart must not race that.
//
// A planned maintenance restarts without spending budget: the run's owners chose none of it,
// and a cluster whose SREs drain nodes weekly must not fail runs for it. A rule that names
// PlannedMaintenance (or the Infrastructure class) can make it spend budget, or fail the run.
// A gang that stopped making progress restarts on its own budget line (see LineOf).
func defaultRule(f Failure) v1alpha1.FailurePolicyRule {
	switch f.Cause {
	case v1alpha1.CausePlannedMaintenance:
		return v1alpha1.FailurePolicyRule{Name: RuleDefaultPlannedMaintenance, Action: v1alpha1.ActionRestartRunIgnoreBudget}
	case v1alpha1.CauseNoProgress:
		return v1alpha1.FailurePolicyRule{Name: RuleDefaultNoProgress, Action: v1alpha1.ActionRestartRun}
	}
	switch f.Class {
	case v1alpha1.ClassInfrastructure:
		return v1alpha1.FailurePolicyRule{Name: RuleDefaultInfrastructure, Action: v1alpha1.ActionRestartRun, ExcludeNode: f.Cause == v1alpha1.CauseGPUFault}
	case v1alpha1.ClassApplication:
		return v1alpha1.FailurePolicyRule{Name: RuleDefaultApplication, Action: v1alpha1.ActionFailRun}
	default:
		return v1alpha1.FailurePolicyRule{Name: RuleDefaultUnknown, Action: v1alpha1.ActionRestartRun}
	}
}

// Line is one restart budget (spec.failurePolicy.maxRestarts) and its count
// (status.restarts): one per class, and NoProgress's own. Its value names it in reasons.
type Line string

// The budget lines.
const (
	LineInfrastructure = Line(v1alpha1.ClassInfrastructure)
	LineApplication    = Line(v1alpha1.ClassApplication)
	LineUnknown        = Line(v1alpha1.ClassUnknown)
	// LineNoProgress: a gang that stopped making progress is class Unknown, but a gang
	// that hangs again and again is a program that deadlocks, not bad luck: its restarts
	// are counted apart, and spend none of the budget of the failures nothing explains.
	LineNoProgress = Line(v1alpha1.CauseNoProgress)
)

// LineOf is the budget line that a failure of class c and cause spends: its class's, but
// NoProgress's own for that cause.
func LineOf(c v1alpha1.Class, cause v1alpha1.Cause) Line {
	if cause == v1alpha1.CauseNoProgress {
		return LineNoProgress
	}
	switch c {
	case v1alpha1.ClassInfrastructure, v1alpha1.ClassApplication:
		return Line(c)
	}
	return LineUnknown
}

// Budget is the restart budget of a class.
func Budget(b v1alpha1.RestartBudgets, c v1alpha1.Class) int32 {
	return LineBudget(b, LineOf(c, ""))
}

// LineBudget is the restart budget of a line.
func LineBudget(b v1alpha1.RestartBudgets, l Line) int32 {
	switch l {
	case LineInfrastructure:
		return ptr.Deref(b.Infrastructure, DefaultMaxInfrastructure)
	case LineApplication:
		return ptr.Deref(b.Application, DefaultMaxApplication)
	case LineNoProgress:
		return ptr.Deref(b.NoProgress, DefaultMaxNoProgress)
	default:
		return ptr.Deref(b.Unknown, DefaultMaxUnknown)
	}
}

// Lines are the budget lines worth showing for run: one per class, and NoProgress's own when
// its attempts can end for want of progress (failurePolicy.progressDeadlineSeconds is set) or
// already did.
func Lines(run *v1alpha1.TrainingRun) []Line {
	lines := []Line{LineInfrastructure, LineApplication, LineUnknown}
	if run.Spec.FailurePolicy.ProgressDeadlineSeconds != nil || run.Status.Restarts.NoProgress > 0 {
		lines = append(lines, LineNoProgress)
	}
	return lines
}

// LineSpent is how many restarts a line has spent.
func LineSpent(r v1alpha1.RestartCounts, l Line) int32 {
	switch l {
	case LineInfrastructure:
		return r.Infrastructure
	case LineApplication:
		return r.Application
	case LineNoProgress:
		return r.NoProgress
	default:
		return r.Unknown
	}
}

// Spend returns the counts with one more restart of class c.
func Spend(r v1alpha1.RestartCounts, c v1alpha1.Class) v1alpha1.RestartCounts {
	return SpendLine(r, LineOf(c, ""))
}

// SpendLine returns the counts with one more restart on line l.
func SpendLine(r v1alpha1.RestartCounts, l Line) v1alpha1.RestartCounts {
	switch l {
	case LineInfrastructure:
		r.Infrastructure++
	case LineApplication:
		r.Application++
	case LineNoProgress:
		r.NoProgress++
	default:
		r.Unknown++
	}
	return r
}
