package deploy

import (
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
)

// TestNodeAgentPoliciesCoverEveryField: the node agent's policies keep every field of a pod's
// status, and of its Node's spec and status, unchanged but the agent's own, by naming each
// field (CEL cannot compare an object less one field). A field that a newer Kubernetes adds
// would be left writable: this fails until the policy names it.
func TestNodeAgentPoliciesCoverEveryField(t *testing.T) {
	const file = "admission/nodeagent.yaml"
	policy := readPolicy(t, file)
	for _, tc := range []struct {
		object string
		typ    reflect.Type
		own    string // the field the agent writes, which the policy checks apart
	}{
		{"status", reflect.TypeFor[corev1.PodStatus](), "conditions"},
		{"spec", reflect.TypeFor[corev1.NodeSpec](), "taints"},
		{"status", reflect.TypeFor[corev1.NodeStatus](), "conditions"},
	} {
		for i := range tc.typ.NumField() {
			name, _, _ := strings.Cut(tc.typ.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" || name == tc.own {
				continue
			}
			want := "dyn(object." + tc.object + ").?" + name + " == dyn(oldObject." + tc.object + ").?" + name
			if !strings.Contains(policy, want) {
				t.Errorf("%s.%s: %s does not keep it unchanged (want %q)", tc.typ.Name(), name, file, want)
			}
		}
	}
}

// TestNodeAgentPodConditionsAreItsOwn: the pod conditions the node agent may write are its
// own three, named by their constants: InfrastructureFault (its evidence), NoProgress (a
// worker silent past its run's progress deadline) and Progressing (a worker's first output
// in its incarnation); every other condition of a pod stays as it was.
func TestNodeAgentPodConditionsAreItsOwn(t *testing.T) {
	const file = "admission/nodeagent.yaml"
	policy := readPolicy(t, file)
	want := `expression: "['` + v1alpha1.PodConditionInfrastructureFault + `', '` + v1alpha1.PodConditionNoProgress + `', '` + v1alpha1.PodConditionProgressing + `']"`
	if !strings.Contains(policy, want) {
		t.Errorf("%s: the agent's own pod conditions are not %q", file, want)
	}
	for _, side := range []string{"object", "oldObject"} {
		if filter := side + ".status.?conditions.orValue([]).filter(c, !(c.type in variables.ownConditions))"; !strings.Contains(policy, filter) {
			t.Errorf("%s: no %q: the pod conditions other than the agent's are not kept", file, filter)
		}
	}
}

// readPolicy is one of the embedded manifests, as text.
func readPolicy(t *testing.T, file string) string {
	t.Helper()
	raw, err := FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestControllerRunPolicyCoversEverySpecField: the controller may write only
// spec.restartScope and spec.successPolicy of a run (from unset); the policy keeps every other
// field of the spec unchanged by naming it. A field added to TrainingRunSpec would be left
// writable: this fails until the policy names it.
func TestControllerRunPolicyCoversEverySpecField(t *testing.T) {
	policy := readPolicy(t, "admission/controller.yaml")
	typ := reflect.TypeFor[v1alpha1.TrainingRunSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		want := "dyn(object.spec).?" + name + " == dyn(oldObject.spec).?" + name
		if !strings.Contains(policy, want) {
			t.Errorf("TrainingRunSpec.%s: admission/controller.yaml does not keep it unchanged (want %q)", name, want)
		}
	}
}

// TestControllerNodePolicyCoversEveryField: the controller's Node policy keeps every field of
// a Node's spec unchanged but its cordon, by naming each (see above).
func TestControllerNodePolicyCoversEveryField(t *testing.T) {
	policy := readPolicy(t, "admission/controller.yaml")
	typ := reflect.TypeFor[corev1.NodeSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || name == "unschedulable" {
			continue
		}
		want := "dyn(object.spec).?" + name + " == dyn(oldObject.spec).?" + name
		if !strings.Contains(policy, want) {
			t.Errorf("NodeSpec.%s: admission/controller.yaml does not keep it unchanged (want %q)", name, want)
		}
	}
}

// TestRolesPolicyNamesTheContract: the roles policy reads the annotations and writes the
// labels that the controller and the pods' env agree on (api/v1alpha1/wellknown.go, the Job
// controller's completion index); a renamed constant would leave the pods without a role.
func TestRolesPolicyNamesTheContract(t *testing.T) {
	policy := readPolicy(t, "admission/roles.yaml")
	for _, want := range []string{
		"kind: MutatingAdmissionPolicy\n",
		"kind: MutatingAdmissionPolicyBinding\n",
		"  name: " + v1alpha1.RolesPolicyName + "\n",
		"policyName: " + v1alpha1.RolesPolicyName + "\n",
		"annotations[?'" + v1alpha1.AnnotationRoles + "']",
		"annotations['" + v1alpha1.AnnotationRoles + "']",
		"annotations[?'" + batchv1.JobCompletionIndexAnnotation + "']",
		"annotations['" + batchv1.JobCompletionIndexAnnotation + "']",
		`"` + v1alpha1.LabelRole + `": `,
		`"` + v1alpha1.LabelRoleIndex + `": `,
		"operations: [CREATE]",
		"failurePolicy: Fail",
	} {
		if !strings.Contains(policy, want) {
			t.Errorf("admission/roles.yaml does not contain %q", want)
		}
	}
}
