package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/deploy"
	"github.com/faultline-dev/faultline/pkg/crdcheck"
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

// ValidateRun checks a run built here (launcher run's flags) as the API server would, and
// what would fail later: see validate.
func ValidateRun(run *v1alpha1.TrainingRun) (warnings []string, err error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(run)
	if err != nil {
		return nil, err
	}
	return validate(run, obj)
}

// runChecker checks TrainingRuns against the CRD this launcher installs.
var runChecker = sync.OnceValues(func() (*crdcheck.Checker, error) {
	b, err := deploy.FS.ReadFile(deploy.TrainingRunCRD)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := sigsyaml.Unmarshal(b, crd); err != nil {
		return nil, fmt.Errorf("%s: %w", deploy.TrainingRunCRD, err)
	}
	return crdcheck.New(crd, v1alpha1.GroupVersion.Version)
})

// validate checks a run as the API server would create it, offline, and reports every error
// at once by field: obj is the run as written (a field the API does not have, a value of the
// wrong type), checked against the CRD's own schema and CEL rules (package crdcheck); run is
// obj decoded (nil where it does not decode), for what the CRD does not say and would fail
// later: a name that cannot name the run's Service and pods, a negative resource limit.
// Warnings are for what may be right but usually is not (a framework no shipped plugin
// serves). problems are the run's own, found before (keys given twice), reported first.
func validate(run *v1alpha1.TrainingRun, obj map[string]any, problems ...string) (warnings []string, err error) {
	errs := append([]string{}, problems...)
	bad := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	checker, err := runChecker()
	if err != nil {
		return nil, fmt.Errorf("the TrainingRun CRD built into this launcher: %w", err)
	}
	for _, e := range checker.Validate(context.Background(), obj) {
		errs = append(errs, e.Error())
	}
	if run != nil {
		if run.Name == "" && run.GenerateName == "" {
			bad("metadata.name", "Required value")
		} else if run.Name != "" {
			if msgs := validation.IsDNS1035Label(run.Name); len(msgs) > 0 {
				bad("metadata.name", "%q: %s (the run's name names its headless Service and its workers, <name>-<index>)", run.Name, strings.Join(msgs, "; "))
			}
		}
		if fw := run.Spec.Framework; fw != "" && fw != v1alpha1.FrameworkNone && !slices.Contains(shippedFrameworks, fw) && len(validation.IsDNS1123Label(fw)) == 0 {
			warnings = append(warnings, fmt.Sprintf("spec.framework %q is not a shipped plugin (%s, or %s): the controller needs faultline-plugin-%s installed beside it, "+
				"or the run stalls", fw, strings.Join(shippedFrameworks, ", "), v1alpha1.FrameworkNone, fw))
		}
		for _, c := range run.Spec.Template.Spec.Containers {
			for name, q := range c.Resources.Limits {
				if q.Sign() < 0 {
					bad("spec.template.spec.containers["+c.Name+"].resources.limits."+string(name), "%s: must not be negative", q.String())
				}
			}
		}
	}
	if len(errs) == 0 {
		return warnings, nil
	}
	name, _, _ := unstructured.NestedString(obj, "metadata", "name")
	if name == "" {
		name, _, _ = unstructured.NestedString(obj, "metadata", "generateName")
	}
	return warnings, UsageError("trainingrun %q is not valid (%d errors):\n  %s", name, len(errs), strings.Join(errs, "\n  "))
}
