package deploy

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestNodeAgentPoliciesCoverEveryField: the node agent's policies keep every field of a pod's
// status, and of its Node's spec and status, unchanged but the agent's own, by naming each
// field (CEL cannot compare an object less one field). A field that a newer Kubernetes adds
// would be left writable: this fails until the policy names it.
func TestNodeAgentPoliciesCoverEveryField(t *testing.T) {
	raw, err := FS.ReadFile("admission/nodeagent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy := string(raw)
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
				t.Errorf("%s.%s: admission/nodeagent.yaml does not keep it unchanged (want %q)", tc.typ.Name(), name, want)
			}
		}
	}
}
