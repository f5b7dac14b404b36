package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/faultline-dev/faultline/pkg/version"
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
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the workers' access: their ServiceAccount,
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // their Role
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // and its binding
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the runs' PodGroups
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the runs' ResourceClaimTemplates
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's runs
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the spares' addresses (EndpointSlices)
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's cordons
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the controller's Jobs
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // the ServiceAccount of the controller's Jobs
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", // the pods' roles
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", // a queued run's pods and queue
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

// TestManifestsOfOneVersion: install renders its own version's three images, --registry moves
// all three, each image flag replaces its own, and the controller's --barrier-image argument is
// the barrier's image (once, whatever the manifest said).
func TestManifestsOfOneVersion(t *testing.T) {
	for name, tc := range map[string]struct {
		opts                       InstallOptions
		controller, agent, barrier string
	}{
		"the version's":   {InstallOptions{Version: "v1.2.3"}, "ghcr.io/faultline-dev/faultline:v1.2.3", "ghcr.io/faultline-dev/faultline-nodeagent:v1.2.3", "ghcr.io/faultline-dev/faultline-barrier:v1.2.3"},
		"registry":        {InstallOptions{Version: "v1.2.3", Registry: "127.0.0.1:5000/"}, "127.0.0.1:5000/faultline:v1.2.3", "127.0.0.1:5000/faultline-nodeagent:v1.2.3", "127.0.0.1:5000/faultline-barrier:v1.2.3"},
		"one image moved": {InstallOptions{Version: "v1.2.3", Registry: "r.example.com/f", BarrierImage: "mirror.example.com/b@sha256:abc"}, "r.example.com/f/faultline:v1.2.3", "r.example.com/f/faultline-nodeagent:v1.2.3", "mirror.example.com/b@sha256:abc"},
		"the launcher's":  {InstallOptions{}, "ghcr.io/faultline-dev/faultline:" + version.Tag(version.Version), "ghcr.io/faultline-dev/faultline-nodeagent:" + version.Tag(version.Version), "ghcr.io/faultline-dev/faultline-barrier:" + version.Tag(version.Version)},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Manifests(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, u := range objs {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				for _, c := range containers {
					m := c.(map[string]any)
					got[u.GetKind()+" image"] = append(got[u.GetKind()+" image"], m["image"].(string))
					args, _, _ := unstructured.NestedStringSlice(m, "args")
					for _, a := range args {
						if strings.HasPrefix(a, "--barrier-image") {
							got[u.GetKind()+" barrier"] = append(got[u.GetKind()+" barrier"], a)
						}
					}
				}
			}
			want := map[string][]string{
				"Deployment image":   {tc.controller},
				"Deployment barrier": {"--barrier-image=" + tc.barrier},
				"DaemonSet image":    {tc.agent},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("images (-want +got):\n%s", diff)
			}
			if im := tc.opts.Images(); im.Controller != tc.controller || im.Agent != tc.agent || im.Barrier != tc.barrier {
				t.Errorf("Images() = %+v", im)
			}
		})
	}
}

func TestManifestsWithoutRolesPolicy(t *testing.T) {
	objs, err := Manifests(InstallOptions{WithoutRolesPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if strings.HasPrefix(u.GetKind(), "MutatingAdmissionPolicy") {
			t.Errorf("%s %s installed with --without-roles-policy", u.GetKind(), u.GetName())
		}
	}
}

func TestPrintVersion(t *testing.T) {
	var b bytes.Buffer
	if err := PrintVersion(&b, "127.0.0.1:5000", false); err != nil {
		t.Fatal(err)
	}
	tag := version.Tag(version.Version)
	want := "launcher " + version.Version + " (Apache-2.0)\n" + devNote() + "installs:\n  controller  127.0.0.1:5000/faultline:" + tag +
		"\n  node agent  127.0.0.1:5000/faultline-nodeagent:" + tag + "\n  barrier     127.0.0.1:5000/faultline-barrier:" + tag + "\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("launcher version (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := PrintVersion(&b, "", true); err != nil || b.String() != version.Version+"\n" {
		t.Errorf("--short: %q, %v", b.String(), err)
	}
}

// TestInstallLabelsPodSecurity: faultline's namespace, where the node agent runs privileged,
// enforces the privileged Pod Security standard, whether the controller's manifests create it
// or the agent alone is installed; no other namespace is labelled.
func TestInstallLabelsPodSecurity(t *testing.T) {
	for name, components := range map[string][]string{"all": nil, "the agent alone": {"agent"}} {
		t.Run(name, func(t *testing.T) {
			objs, err := Manifests(InstallOptions{Components: components})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, u := range objs {
				if u.GetKind() != "Namespace" {
					continue
				}
				level := u.GetLabels()["pod-security.kubernetes.io/enforce"]
				switch u.GetName() {
				case "faultline-system":
					found = true
					if level != "privileged" {
						t.Errorf("namespace faultline-system: pod-security.kubernetes.io/enforce=%q, want privileged (the agent is privileged)", level)
					}
				default:
					if level != "" {
						t.Errorf("namespace %s labelled %q: only faultline's own needs it", u.GetName(), level)
					}
				}
			}
			if !found {
				t.Fatal("no namespace faultline-system in the manifests")
			}
		})
	}
}

// TestInstallLabelsAndAgentFlags: every object install applies carries the recommended labels
// (part of faultline, its component, the version installed, managed by the launcher) and its
// component's ApplySet; the agent's driver root and runtime endpoint reach its container's
// arguments once each.
func TestInstallLabelsAndAgentFlags(t *testing.T) {
	objs, err := Manifests(InstallOptions{Version: "v1.2.3", AgentDriverRoot: "/host/opt/nvidia", AgentCRIEndpoint: "unix:///host/run/crio/crio.sock"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		l := u.GetLabels()
		if u.GetKind() == "Namespace" && l["app.kubernetes.io/component"] == "" {
			continue // a namespace added for a component that uses it
		}
		if l["app.kubernetes.io/part-of"] != "faultline" || l["app.kubernetes.io/version"] != "v1.2.3" || l["app.kubernetes.io/managed-by"] != "launcher" ||
			l[ApplySetPartOfLabel] != ApplySetID(l["app.kubernetes.io/component"]) {
			t.Errorf("%s %s labels %v", u.GetKind(), u.GetName(), l)
		}
		if u.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		got, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, want := range []string{"--driver-root=/host/opt/nvidia", "--cri-endpoint=unix:///host/run/crio/crio.sock", "--host-root=/host"} {
			if n := slices.Index(got, want); n < 0 || slices.Index(got[n+1:], want) >= 0 {
				t.Errorf("the agent's args %v: want %s once", got, want)
			}
		}
	}
}
