package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestManifests(t *testing.T) {
	for name, tc := range map[string]struct {
		opts  InstallOptions
		kinds []string
	}{
		"all": {InstallOptions{}, []string{
			"CustomResourceDefinition", "CustomResourceDefinition", "Namespace",
			"ClusterRole", "ClusterRole", // the users' roles, aggregated into edit and view
			"ClusterRole",                                                   // the SREs' NodeMaintenances
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the workers' identity
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // evidence
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the agent's pods
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the agent's node
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the agent's heartbeat
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's pods
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the workers' access
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's runs
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's cordons
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", // the pods' roles
			"ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Deployment", "ClusterRole", "Role", "FlowSchema",
			"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet", "FlowSchema",
		}},
		"crd only":              {InstallOptions{Components: []string{"crd"}}, []string{"CustomResourceDefinition", "CustomResourceDefinition", "ClusterRole", "ClusterRole", "ClusterRole"}},
		"kueue only when named": {InstallOptions{Components: []string{"kueue"}}, []string{"ClusterRole", "ClusterRoleBinding"}},
		// The agent without the controller still gets the namespace it runs in.
		"agent adds its namespace": {InstallOptions{Components: []string{"agent", "crd"}}, []string{
			"CustomResourceDefinition", "CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRole", "ClusterRole",
			"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "DaemonSet", "FlowSchema",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Manifests(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if diff := cmp.Diff(tc.kinds, kinds); diff != "" {
				t.Errorf("kinds in apply order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestManifestsImagesAndErrors(t *testing.T) {
	objs, err := Manifests(InstallOptions{ControllerImage: "example.com/c:1", AgentImage: "example.com/a:1"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := PrintManifests(&b, objs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: example.com/c:1", "image: example.com/a:1", "\n---\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("install --print lacks %q", want)
		}
	}
	if _, err := Manifests(InstallOptions{Components: []string{"operator"}}); err == nil {
		t.Error("an unknown component was accepted")
	} else if msg, code := Message(err, ""); code != ExitUsage || !strings.Contains(msg, "crd, admission, controller, agent") {
		t.Errorf("unknown component: %q, exit %d", msg, code)
	}
}
