package cli

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// The CRD's bounds that ValidateRun checks; TestValidateBoundsAreTheCRDs keeps them equal
// to deploy/crd's.
const (
	minWorkers       = 1
	maxWorkers       = 10000
	maxSettleSeconds = 300
)

// shippedFrameworks are the plugins faultline ships (pkg/framework.Shipped, kept apart so
// that the CLI's validation needs no plugin host).
var shippedFrameworks = []string{"jax", "pytorch", "tensorflow"}

// DryRun is --dry-run: none (create), client (check here and print), server (the API
// server checks and stores nothing).
type DryRun string

const (
	DryRunNone   DryRun = "none"
	DryRunClient DryRun = "client"
	DryRunServer DryRun = "server"
)

// ParseDryRun reads --dry-run ("--dry-run" alone is client, as kubectl's).
func ParseDryRun(s string) (DryRun, error) {
	switch d := DryRun(s); d {
	case DryRunNone, DryRunClient, DryRunServer:
		return d, nil
	case "":
		return DryRunNone, nil
	}
	return "", UsageError("--dry-run=%s: use client (check here and print), server (the API server checks, nothing is stored) or none", s)
}

// ValidateRun checks a run as far as the client can: what the CRD's schema would refuse
// (bounds, enums, patterns) and what would fail later (a name that cannot name the run's
// Service and pods). The CRD's cross-field rules are the API server's to check:
// --dry-run=server. Warnings are for what may be right but usually is not (a framework no
// shipped plugin serves).
func ValidateRun(run *v1alpha1.TrainingRun) (warnings []string, err error) {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	if run.Name == "" && run.GenerateName == "" {
		bad("metadata.name", "required")
	} else if run.Name != "" {
		if msgs := validation.IsDNS1035Label(run.Name); len(msgs) > 0 {
			bad("metadata.name", "%q: %s (the run's name names its headless Service and its workers, <name>-<index>)", run.Name, strings.Join(msgs, "; "))
		}
	}
	s := &run.Spec
	if s.Workers < minWorkers || s.Workers > maxWorkers {
		bad("spec.workers", "%d: must be %d to %d", s.Workers, minWorkers, maxWorkers)
	}
	if fw := s.Framework; fw != "" {
		if msgs := validation.IsDNS1123Label(fw); len(msgs) > 0 {
			bad("spec.framework", "%q: %s", fw, strings.Join(msgs, "; "))
		} else if fw != v1alpha1.FrameworkNone && !slices.Contains(shippedFrameworks, fw) {
			warnings = append(warnings, fmt.Sprintf("spec.framework %q is not a shipped plugin (%s, or %s): the controller needs faultline-plugin-%s installed beside it, "+
				"or the run stalls", fw, strings.Join(shippedFrameworks, ", "), v1alpha1.FrameworkNone, fw))
		}
	}
	switch s.RestartScope {
	case "", v1alpha1.RestartScopeGang, v1alpha1.RestartScopeIndex:
	default:
		bad("spec.restartScope", "%q: must be %s or %s", s.RestartScope, v1alpha1.RestartScopeGang, v1alpha1.RestartScopeIndex)
	}
	switch s.SuccessPolicy {
	case "", v1alpha1.SuccessPolicyAllWorkers, v1alpha1.SuccessPolicyLeader:
	default:
		bad("spec.successPolicy", "%q: must be %s or %s", s.SuccessPolicy, v1alpha1.SuccessPolicyAllWorkers, v1alpha1.SuccessPolicyLeader)
	}
	fp := &s.FailurePolicy
	for _, b := range []struct {
		name string
		n    *int32
	}{{"infrastructure", fp.MaxRestarts.Infrastructure}, {"application", fp.MaxRestarts.Application}, {"unknown", fp.MaxRestarts.Unknown}} {
		if ptr.Deref(b.n, 0) < 0 {
			bad("spec.failurePolicy.maxRestarts."+b.name, "%d: must not be negative", *b.n)
		}
	}
	if n := ptr.Deref(fp.SettleSeconds, 0); n < 0 || n > maxSettleSeconds {
		bad("spec.failurePolicy.settleSeconds", "%d: must be 0 to %d", n, maxSettleSeconds)
	}
	if n := ptr.Deref(s.TTLSecondsAfterFinished, 0); n < 0 {
		bad("spec.ttlSecondsAfterFinished", "%d: must not be negative", n)
	}
	if s.RestartScope == v1alpha1.RestartScopeIndex && len(fp.Rules) > 0 {
		bad("spec.failurePolicy.rules", "have no effect with restartScope Index (the Job controller retries each index): remove them or use restartScope Gang")
	}
	if len(s.Template.Spec.Containers) == 0 {
		bad("spec.template.spec.containers", "must name at least one container")
	}
	if p := s.Template.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyNever {
		bad("spec.template.spec.restartPolicy", "%s: must be Never (or unset): faultline restarts workers itself", p)
	}
	for _, c := range s.Template.Spec.Containers {
		for name, q := range c.Resources.Limits {
			if q.Sign() < 0 {
				bad("spec.template.spec.containers["+c.Name+"].resources.limits."+string(name), "%s: must not be negative", q.String())
			}
		}
	}
	if len(errs) == 0 {
		return warnings, nil
	}
	name := run.Name
	if name == "" {
		name = run.GenerateName
	}
	return warnings, UsageError("trainingrun %q is not valid:\n  %s", name, strings.Join(errs, "\n  "))
}
