package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EInvalidSpecsRejected proves that the CRD itself (OpenAPI schema, enums, list types
// and CEL rules, as generated from the markers in api/v1alpha1) makes the API server refuse
// bad TrainingRuns with a 422 that names the offending field and says what is wrong, before
// any controller sees them; that the immutable fields stay immutable; and that a minimal
// valid run is accepted and defaulted as shared/DESIGN.md documents.
//
// The objects are built as unstructured maps: the typed Go struct cannot carry most of the
// bad values (unknown enum strings, a missing container list, duplicate list-map keys).
func TestE2EInvalidSpecsRejected(t *testing.T) {
	t.Parallel()
	runs := unstructuredRuns(t)

	rules := func(rs ...map[string]any) []any {
		out := make([]any, len(rs))
		for i, r := range rs {
			out[i] = r
		}
		return out
	}
	failurePolicy := func(spec map[string]any) map[string]any {
		fp, ok := spec["failurePolicy"].(map[string]any)
		if !ok {
			fp = map[string]any{}
			spec["failurePolicy"] = fp
		}
		return fp
	}

	for _, tc := range []struct {
		name   string
		mutate func(spec map[string]any)
		field  string // the field of the 422's cause
		phrase string // what its message must say
	}{
		{"workers-zero", func(s map[string]any) { s["workers"] = int64(0) },
			"spec.workers", "greater than or equal to 1"},
		{"workers-over-10000", func(s map[string]any) { s["workers"] = int64(10001) },
			"spec.workers", "less than or equal to 10000"},
		{"workers-missing", func(s map[string]any) { delete(s, "workers") },
			"spec.workers", "Required value"},
		{"restart-policy-on-failure", func(s map[string]any) { podSpec(s)["restartPolicy"] = "OnFailure" },
			"spec.template.spec.restartPolicy", "must be Never"},
		{"restart-policy-always", func(s map[string]any) { podSpec(s)["restartPolicy"] = "Always" },
			"spec.template.spec.restartPolicy", "must be Never"},
		{"no-containers", func(s map[string]any) { podSpec(s)["containers"] = []any{} },
			"spec.template.spec.containers", "must name at least one container"},
		{"template-without-pod-spec", func(s map[string]any) {
			s["template"] = map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "x"}}}
		}, "spec.template.spec.containers", "must name at least one container"},
		{"duplicate-rule-names", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(
				map[string]any{"name": "gpu", "onCauses": []any{"GPUFault"}, "action": "RestartRun"},
				map[string]any{"name": "gpu", "onCauses": []any{"NodeLost"}, "action": "FailRun"})
		}, "spec.failurePolicy.rules[1]", "Duplicate value"},
		{"unknown-action", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "gpu", "action": "Retry"})
		}, "spec.failurePolicy.rules[0].action", `Unsupported value: "Retry"`},
		{"missing-action", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "gpu", "onCauses": []any{"GPUFault"}})
		}, "spec.failurePolicy.rules[0].action", "Required value"},
		{"bad-rule-name", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "Bad_GPU", "action": "FailRun"})
		}, "spec.failurePolicy.rules[0].name", "should match"},
		{"unknown-cause", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "cosmic", "onCauses": []any{"GPUFault", "CosmicRay"}, "action": "FailRun"})
		}, "spec.failurePolicy.rules[0].onCauses[1]", `Unsupported value: "CosmicRay"`},
		{"duplicate-cause", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "gpu", "onCauses": []any{"GPUFault", "GPUFault"}, "action": "RestartRun"})
		}, "spec.failurePolicy.rules[0].onCauses[1]", "Duplicate value"},
		{"unknown-class", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "peer", "onClasses": []any{"Peer"}, "action": "FailRun"})
		}, "spec.failurePolicy.rules[0].onClasses[0]", `Unsupported value: "Peer"`},
		{"on-causes-peer-failure", func(s map[string]any) {
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "peers", "onCauses": []any{"NodeLost", "PeerFailure"}, "action": "RestartRun"})
		}, "spec.failurePolicy.rules[0].onCauses", "must not contain PeerFailure"},
		{"negative-infrastructure-budget", func(s map[string]any) {
			failurePolicy(s)["maxRestarts"] = map[string]any{"infrastructure": int64(-1)}
		}, "spec.failurePolicy.maxRestarts.infrastructure", "greater than or equal to 0"},
		{"unknown-restart-mode", func(s map[string]any) { failurePolicy(s)["restartMode"] = "Rolling" },
			"spec.failurePolicy.restartMode", `supported values: "Auto", "InPlace", "Recreate"`},
		{"in-place-with-index-scope", func(s map[string]any) {
			s["restartScope"] = "Index"
			failurePolicy(s)["restartMode"] = "InPlace"
		}, "spec.failurePolicy.restartMode", "InPlace applies to restartScope Gang"},
		{"roles-with-index-scope", func(s map[string]any) {
			s["restartScope"] = "Index"
			s["roles"] = []any{map[string]any{"name": "ps"}}
		}, "spec.roles", "apply to restartScope Gang"},
		{"role-named-twice", func(s map[string]any) {
			s["roles"] = []any{map[string]any{"name": "ps"}, map[string]any{"name": "ps"}}
		}, "spec.roles[1]", "Duplicate value"},
		{"role-name-not-a-label", func(s map[string]any) {
			s["roles"] = []any{map[string]any{"name": "Parameter Server"}}
		}, "spec.roles[0].name", "should match"},
		{"negative-settle-seconds", func(s map[string]any) { failurePolicy(s)["settleSeconds"] = int64(-1) },
			"spec.failurePolicy.settleSeconds", "greater than or equal to 0"},
		{"settle-seconds-over-300", func(s map[string]any) { failurePolicy(s)["settleSeconds"] = int64(301) },
			"spec.failurePolicy.settleSeconds", "less than or equal to 300"},
		{"backoff-initial-over-max", func(s map[string]any) {
			failurePolicy(s)["backoff"] = map[string]any{"initialSeconds": int64(600), "maxSeconds": int64(60)}
		}, "spec.failurePolicy.backoff.initialSeconds", "must not exceed spec.failurePolicy.backoff.maxSeconds"},
		{"backoff-initial-over-default-max", func(s map[string]any) {
			failurePolicy(s)["backoff"] = map[string]any{"initialSeconds": int64(301)}
		}, "spec.failurePolicy.backoff.initialSeconds", "must not exceed spec.failurePolicy.backoff.maxSeconds"},
		{"backoff-limit-per-index-with-gang", func(s map[string]any) {
			s["restartScope"] = "Gang"
			s["backoffLimitPerIndex"] = int64(2)
		}, "spec.backoffLimitPerIndex", "applies only to restartScope Index"},
		{"max-failed-indexes-with-default-gang", func(s map[string]any) { s["maxFailedIndexes"] = int64(1) },
			"spec.maxFailedIndexes", "applies only to restartScope Index"},
		{"max-failed-indexes-over-workers", func(s map[string]any) {
			s["restartScope"] = "Index"
			s["workers"] = int64(2)
			s["maxFailedIndexes"] = int64(3)
		}, "spec.maxFailedIndexes", "must not exceed spec.workers"},
		{"framework-uppercase", func(s map[string]any) { s["framework"] = "TensorFlow" },
			"spec.framework", "should match"},
		{"unknown-restart-scope", func(s map[string]any) { s["restartScope"] = "Pod" },
			"spec.restartScope", `Unsupported value: "Pod"`},
		{"unknown-success-policy", func(s map[string]any) { s["successPolicy"] = "Majority" },
			"spec.successPolicy", `Unsupported value: "Majority"`},
		// In Index scope the Job controller retries each index: a failure policy would be ignored.
		{"index-scope-rules", func(s map[string]any) {
			s["restartScope"] = "Index"
			failurePolicy(s)["rules"] = rules(map[string]any{"name": "gpu", "onCauses": []any{"GPUFault"}, "action": "RestartRun"})
		}, "spec.failurePolicy.rules", "have no effect with restartScope Index"},
		{"index-scope-budget", func(s map[string]any) {
			s["restartScope"] = "Index"
			failurePolicy(s)["maxRestarts"] = map[string]any{"application": int64(3)}
		}, "spec.failurePolicy.maxRestarts", "has no effect with restartScope Index"},
		{"index-scope-no-progress-budget", func(s map[string]any) {
			s["restartScope"] = "Index"
			failurePolicy(s)["maxRestarts"] = map[string]any{"noProgress": int64(3)}
		}, "spec.failurePolicy.maxRestarts", "has no effect with restartScope Index"},
		// The progress deadline (issue 42): off unless set, at least 30 s, for a gang.
		{"progress-deadline-under-30s", func(s map[string]any) { failurePolicy(s)["progressDeadlineSeconds"] = int64(29) },
			"spec.failurePolicy.progressDeadlineSeconds", "greater than or equal to 30"},
		{"progress-deadline-over-a-week", func(s map[string]any) { failurePolicy(s)["progressDeadlineSeconds"] = int64(604801) },
			"spec.failurePolicy.progressDeadlineSeconds", "less than or equal to 604800"},
		{"progress-deadline-with-index-scope", func(s map[string]any) {
			s["restartScope"] = "Index"
			failurePolicy(s)["progressDeadlineSeconds"] = int64(600)
		}, "spec.failurePolicy.progressDeadlineSeconds", "applies to restartScope Gang"},
		{"negative-no-progress-budget", func(s map[string]any) {
			failurePolicy(s)["maxRestarts"] = map[string]any{"noProgress": int64(-1)}
		}, "spec.failurePolicy.maxRestarts.noProgress", "greater than or equal to 0"},
		// A template would copy these onto every worker: evidence must come from the node agent.
		{"template-evidence-annotation", func(s map[string]any) {
			templateMeta(s)["annotations"] = map[string]any{v1alpha1.AnnotationFaultEvidence: `{"source":"nvml-event","cause":"GPUFault"}`}
		}, "spec.template.metadata.annotations", "must not use keys under faultline.dev/"},
		{"template-attempt-label", func(s map[string]any) {
			templateMeta(s)["labels"] = map[string]any{v1alpha1.LabelAttempt: "9"}
		}, "spec.template.metadata.labels", "must not use keys under faultline.dev/"},
		{"template-infrastructure-readiness-gate", func(s map[string]any) {
			podSpec(s)["readinessGates"] = []any{map[string]any{"conditionType": v1alpha1.PodConditionInfrastructureFault}}
		}, "spec.template.spec.readinessGates", "must not name faultline.dev/ conditions"},
		{"template-faultline-scheduling-gate", func(s map[string]any) {
			podSpec(s)["schedulingGates"] = []any{map[string]any{"name": v1alpha1.GroupName + "/hold"}}
		}, "spec.template.spec.schedulingGates", "must not name faultline.dev/ gates"},
		// faultline's own names on the workers: its barrier and its run volume.
		{"template-barrier-named-init-container", func(s map[string]any) {
			podSpec(s)["initContainers"] = []any{map[string]any{"name": v1alpha1.BarrierContainer, "image": "busybox"}}
		}, "spec.template.spec.initContainers", "must not name a container " + v1alpha1.BarrierContainer},
		{"template-run-volume", func(s map[string]any) {
			podSpec(s)["volumes"] = []any{map[string]any{"name": v1alpha1.RunVolume, "emptyDir": map[string]any{}}}
		}, "spec.template.spec.volumes", "must not name a volume " + v1alpha1.RunVolume},
		// GPUs through DRA (spec.gpus): one way to ask, a class's name, a count DRA allocates.
		{"gpus-and-device-plugin-gpus", func(s map[string]any) {
			s["gpus"] = map[string]any{"deviceClassName": "gpu.nvidia.com"}
			podSpec(s)["containers"].([]any)[0].(map[string]any)["resources"] = map[string]any{"limits": map[string]any{v1alpha1.ResourceGPU: "1"}}
		}, "spec.gpus", "keep one"},
		{"gpus-with-roles", func(s map[string]any) {
			s["gpus"] = map[string]any{"deviceClassName": "gpu.nvidia.com"}
			s["roles"] = []any{map[string]any{"name": "ps"}}
		}, "spec.gpus", "ask for each role's GPUs in spec.roles[].containers[].resources"},
		{"gpus-count-over-32", func(s map[string]any) {
			s["gpus"] = map[string]any{"deviceClassName": "gpu.nvidia.com", "count": int64(33)}
		}, "spec.gpus.count", "less than or equal to 32"},
		{"gpus-class-not-a-name", func(s map[string]any) {
			s["gpus"] = map[string]any{"deviceClassName": "GPU_A100"}
		}, "spec.gpus.deviceClassName", "should match"},
		{"template-claim-named-as-faultlines", func(s map[string]any) {
			podSpec(s)["resourceClaims"] = []any{map[string]any{"name": v1alpha1.ClaimGPUs, "resourceClaimTemplateName": "mine"}}
		}, "spec.template.spec.resourceClaims", "must not name a claim " + v1alpha1.ClaimGPUs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			spec := validSpec()
			tc.mutate(spec)
			_, err := runs.Create(ctx, trainingRun(tc.name, spec), metav1.CreateOptions{})
			requireInvalid(t, err, tc.field, tc.phrase)
		})
	}

	// Fields that define the gang cannot change under a running controller.
	// A scope set (by the user, or by the controller from the plugin's choice) stays.
	withGang := func(s map[string]any) map[string]any { s["restartScope"] = string(v1alpha1.RestartScopeGang); return s }
	for _, tc := range []struct {
		name   string
		spec   map[string]any
		mutate func(spec map[string]any)
		field  string
		phrase string
	}{
		{"update-workers", validSpec(), func(s map[string]any) { s["workers"] = int64(3) },
			"spec.workers", "spec.workers is immutable"},
		{"update-framework", validSpec(), func(s map[string]any) { s["framework"] = "jax" },
			"spec.framework", "spec.framework is immutable"},
		{"update-restart-scope", withGang(validSpec()), func(s map[string]any) { s["restartScope"] = "Index" },
			"spec.restartScope", "spec.restartScope is immutable"},
		{"remove-restart-scope", withGang(validSpec()), func(s map[string]any) { delete(s, "restartScope") },
			"spec.restartScope", "spec.restartScope cannot be removed once set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			created, err := runs.Create(ctx, trainingRun(tc.name, tc.spec), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create the valid run to update: %v", err)
			}
			spec, _, _ := unstructured.NestedMap(created.Object, "spec")
			tc.mutate(spec)
			if err := unstructured.SetNestedMap(created.Object, spec, "spec"); err != nil {
				t.Fatal(err)
			}
			_, err = runs.Update(ctx, created, metav1.UpdateOptions{})
			requireInvalid(t, err, tc.field, tc.phrase)
		})
	}

	// The positive control: a minimal spec is accepted and the API server fills the
	// documented defaults; a later change to a mutable field is accepted too.
	t.Run("minimal-valid-spec-defaulted", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		created, err := runs.Create(ctx, trainingRun("minimal", validSpec()), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("minimal valid TrainingRun rejected: %v", err)
		}
		stored, err := runs.Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(stored.Object, "spec")
		for field, want := range map[string]any{
			"framework": v1alpha1.FrameworkNone,
			"workers":   int64(2),
		} {
			if got := spec[field]; got != want {
				t.Errorf("spec.%s = %#v, want %#v", field, got, want)
			}
		}
		// No CRD default: the framework's plugin chooses, and the controller writes its
		// choice (none runs here).
		for _, field := range []string{"restartScope", "successPolicy"} {
			if got, ok := spec[field]; ok {
				t.Errorf("spec.%s = %#v at creation, want it unset for the framework to choose", field, got)
			}
		}
		wantPolicy := map[string]any{
			"maxRestarts":   map[string]any{"infrastructure": int64(10), "application": int64(0), "unknown": int64(1), "noProgress": int64(1)},
			"backoff":       map[string]any{"initialSeconds": int64(5), "maxSeconds": int64(300), "resetAfterSeconds": int64(600)},
			"settleSeconds": int64(1),
			"restartMode":   "Auto",
		}
		if diff := cmp.Diff(wantPolicy, spec["failurePolicy"]); diff != "" {
			t.Errorf("defaulted spec.failurePolicy (-want +got):\n%s", diff)
		}

		if err := unstructured.SetNestedField(stored.Object, true, "spec", "suspend"); err != nil {
			t.Fatal(err)
		}
		if _, err := runs.Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("suspending a run (a mutable field) rejected: %v", err)
		}
	})
}

// validSpec is the smallest valid TrainingRun spec, fresh for each use.
func validSpec() map[string]any {
	return map[string]any{
		"workers": int64(2),
		"template": map[string]any{
			"spec": map[string]any{
				"containers": []any{map[string]any{"name": "worker", "image": "trainer:latest"}},
			},
		},
	}
}

// podSpec returns spec.template.spec of a spec built by validSpec.
func podSpec(spec map[string]any) map[string]any {
	return spec["template"].(map[string]any)["spec"].(map[string]any)
}

// templateMeta is the template's metadata, created if missing.
func templateMeta(spec map[string]any) map[string]any {
	tmpl := spec["template"].(map[string]any)
	m, ok := tmpl["metadata"].(map[string]any)
	if !ok {
		m = map[string]any{}
		tmpl["metadata"] = m
	}
	return m
}

func trainingRun(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       v1alpha1.KindTrainingRun,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// requireInvalid asserts that err is a 422 Invalid whose message names field and that one of
// its causes is on exactly that field and says phrase.
func requireInvalid(t *testing.T, err error, field, phrase string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want 422 Invalid on %s saying %q", field, phrase)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v (reason %q), want 422 Invalid on %s", err, apierrors.ReasonForError(err), field)
	}
	if !strings.Contains(err.Error(), field) {
		t.Errorf("error does not name %s: %v", field, err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("422 without details: %v", err)
	}
	var causes []string
	for _, c := range status.Status().Details.Causes {
		if c.Field == field && strings.Contains(c.Message, phrase) {
			return
		}
		causes = append(causes, fmt.Sprintf("%s: %s", c.Field, c.Message))
	}
	t.Errorf("no cause on %s saying %q; causes:\n  %s", field, phrase, strings.Join(causes, "\n  "))
}

// TestE2EFrameworkOptionsFixedWhileAdmitted (issue 56): while Kueue admits a run (its status
// names the ClusterQueue of the admission), the API server refuses a change of its
// frameworkOptions at once, naming the field: they decide the framework's roles, which the
// admission counted. Queued again (no admission), the same change is taken.
func TestE2EFrameworkOptionsFixedWhileAdmitted(t *testing.T) {
	t.Parallel()
	runs := unstructuredRuns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := validSpec()
	spec["frameworkOptions"] = map[string]any{"strategy": "ParameterServer", "ps": "2"}
	run, err := runs.Create(ctx, trainingRun("admitted", spec), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the controller writes of the run's Workload: admitted to a ClusterQueue, or not.
	setQueue := func(clusterQueue string) {
		t.Helper()
		queue := map[string]any{"name": "team-a"}
		if clusterQueue != "" {
			queue["clusterQueue"] = clusterQueue
		}
		if err := unstructured.SetNestedMap(run.Object, queue, "status", "queue"); err != nil {
			t.Fatal(err)
		}
		if run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("write the run's queue status: %v", err)
		}
	}
	setOptions := func(options map[string]any) error {
		cp := run.DeepCopy()
		if options == nil {
			unstructured.RemoveNestedField(cp.Object, "spec", "frameworkOptions")
		} else if err := unstructured.SetNestedMap(cp.Object, options, "spec", "frameworkOptions"); err != nil {
			t.Fatal(err)
		}
		updated, err := runs.Update(ctx, cp, metav1.UpdateOptions{})
		if err == nil {
			run = updated
		}
		return err
	}

	setQueue("cluster-a")
	requireInvalid(t, setOptions(map[string]any{"strategy": "ParameterServer", "ps": "4"}), "spec.frameworkOptions", "fixed while Kueue admits the run")
	requireInvalid(t, setOptions(nil), "spec.frameworkOptions", "fixed while Kueue admits the run")
	// Other fields stay mutable while admitted.
	if err := unstructured.SetNestedField(run.Object, true, "spec", "suspend"); err != nil {
		t.Fatal(err)
	}
	if run, err = runs.Update(ctx, run, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("suspending an admitted run rejected: %v", err)
	}
	setQueue("")
	if err := setOptions(map[string]any{"strategy": "ParameterServer", "ps": "4"}); err != nil {
		t.Fatalf("a queued run's frameworkOptions change rejected: %v", err)
	}
}

// unstructuredRuns is the TrainingRuns of a namespace of its own on the shared cluster, as
// unstructured objects: the typed struct cannot carry the values these tests send.
func unstructuredRuns(t *testing.T) dynamic.ResourceInterface {
	t.Helper()
	c := cluster.Shared(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(v1alpha1.GroupVersion.WithResource(v1alpha1.ResourceTrainingRun)).Namespace(c.Namespace(t))
}
