package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/faultline-dev/faultline/pkg/podgroup"
)

// served is every kind the manifests apply, but those named.
func served(t *testing.T, but ...string) map[schema.GroupVersionKind]bool {
	t.Helper()
	objs, err := Manifests(InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[schema.GroupVersionKind]bool{}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		out[gvk] = true
		for _, b := range but {
			if gvk.Kind == b {
				delete(out, gvk)
			}
		}
	}
	return out
}

// withPodGroups adds the PodGroups of Kubernetes 1.37's gang scheduling to served.
func withPodGroups(served map[schema.GroupVersionKind]bool) map[schema.GroupVersionKind]bool {
	served[podgroup.GroupVersion.WithKind(podgroup.Kind)] = true
	return served
}

func TestPreflight(t *testing.T) {
	objs, err := Manifests(InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	without, err := Manifests(InstallOptions{WithoutRolesPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		without bool
		facts   ClusterFacts
		missing []string // substrings, in order, of the refusal; none: accepted
		notes   []string
	}{
		"a 1.36 cluster": {
			facts: ClusterFacts{Version: "v1.36.3", Served: served(t), JobManagedBy: ptr.To(true), Nodes: 2, InPlaceNodes: 2, Kueue: true},
			notes: []string{"every node's kubelet (2) declares", "gang scheduling: off", "Kueue: installed"},
		},
		"a 1.37 cluster that gang-schedules": {
			facts: ClusterFacts{Version: "v1.37.2", Served: withPodGroups(served(t)), JobManagedBy: ptr.To(true), Nodes: 2, InPlaceNodes: 2},
			notes: []string{"gang scheduling: on (PodGroup scheduling.k8s.io/v1beta1 served)"},
		},
		"a 1.35 cluster": {
			facts: ClusterFacts{Version: "v1.35.2", Served: served(t, "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"), JobManagedBy: ptr.To(true)},
			missing: []string{
				"Kubernetes v1.35.2", "nothing was applied",
				"MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is not served: Kubernetes 1.36 and later serve it (this cluster runs v1.35.2)",
				"launcher install --without-roles-policy",
				"MutatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1) is not served",
			},
		},
		"a 1.35 cluster, without the roles policy": {
			without: true,
			facts:   ClusterFacts{Version: "v1.35.2", Served: served(t, "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"), JobManagedBy: ptr.To(true), Nodes: 3, InPlaceNodes: 1},
			notes:   []string{"1 of 3 nodes' kubelets declare", "Kueue: not installed"},
		},
		"the API turned off": {
			facts:   ClusterFacts{Version: "v1.36.3", Served: served(t, "MutatingAdmissionPolicy"), JobManagedBy: ptr.To(true)},
			missing: []string{"MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is not served: Kubernetes 1.36 and later serve it; this cluster runs v1.36.3 with it turned off (kube-apiserver --runtime-config)"},
		},
		"a 1.29 cluster": {
			facts: ClusterFacts{Version: "v1.29.4", Served: served(t, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"), JobManagedBy: ptr.To(false)},
			missing: []string{
				"ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) is not served: Kubernetes 1.30 and later serve it (this cluster runs v1.29.4)",
				"MutatingAdmissionPolicy",
				"Job spec.managedBy is dropped by this cluster (v1.29.4)", "Kubernetes 1.32 and later keep it",
			},
		},
		"managedBy unknown": {
			facts: ClusterFacts{Version: "v1.36.3", Served: served(t)},
			notes: []string{"could not check Job spec.managedBy"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := objs
			if tc.without {
				o = without
			}
			r := Preflight(o, tc.facts)
			err := r.Err(tc.facts)
			if len(tc.missing) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				if err == nil {
					t.Fatalf("accepted; want a refusal naming %q", tc.missing)
				}
				msg := err.Error()
				for _, want := range tc.missing {
					i := strings.Index(msg, want)
					if i < 0 {
						t.Errorf("refusal lacks %q (in order):\n%s", want, err)
						continue
					}
					msg = msg[i+len(want):]
				}
			}
			notes := strings.Join(r.Notes, "\n")
			for _, want := range tc.notes {
				if !strings.Contains(notes, want) {
					t.Errorf("notes lack %q:\n%s", want, notes)
				}
			}
		})
	}
}

// TestAPINeedsCoverTheManifests: the preflight knows when Kubernetes gained every kind the
// manifests apply (and docs/deploy.md's table lists them: TestSupportedVersionsTable).
func TestAPINeedsCoverTheManifests(t *testing.T) {
	objs, err := Manifests(InstallOptions{Components: append(append([]string{}, InstallComponents...), OptionalComponents...)})
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, u := range objs {
		if _, ok := APINeeds[u.GroupVersionKind()]; !ok {
			unknown = append(unknown, u.GroupVersionKind().String())
		}
	}
	if diff := cmp.Diff([]string(nil), unknown); diff != "" {
		t.Errorf("kinds the manifests apply without an entry in APINeeds (-want +got):\n%s", diff)
	}
}

func TestOlderThan(t *testing.T) {
	for v, want := range map[[2]string]bool{
		{"v1.35.2", "1.36"}: true, {"v1.36.0", "1.36"}: false, {"v1.36.3-gke.100", "1.36"}: false, {"v2.0.0", "1.36"}: false,
		{"v1.9.0", "1.16"}: true, {"garbage", "1.36"}: false,
	} {
		if got := olderThan(v[0], v[1]); got != want {
			t.Errorf("olderThan(%q, %q) = %t, want %t", v[0], v[1], got, want)
		}
	}
}
