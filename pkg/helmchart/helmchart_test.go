package helmchart

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/version"
)

// chartDir is Dir from this package's directory.
var chartDir = filepath.Join("..", "..", Dir)

// loadChart is the chart as the tree has it, its appVersion the launcher's version (as
// install's default version is).
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.AppVersion = version.Version
	return ch
}

// render is what `helm template` prints for the chart and values, as objects, from a release
// in namespace, with apiVersions (--api-versions) as the cluster's.
func render(ch *chart.Chart, namespace string, values map[string]any, apiVersions ...string) ([]*unstructured.Unstructured, error) {
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "faultline"
	install.Namespace = namespace
	install.APIVersions = apiVersions
	r, err := install.Run(ch, values)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("a release of type %T", r)
	}
	return decode(rel.Manifest)
}

func decode(stream string) ([]*unstructured.Unstructured, error) {
	return cli.DecodeObjects(strings.NewReader(stream))
}

// byName keys objects by kind, namespace and name, each as its YAML decodes (one
// representation of numbers for both sides).
func byName(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, u := range objs {
		b, err := sigsyaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := decode(string(b))
		if err != nil || len(docs) != 1 {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		key := u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
		if _, dup := out[key]; dup {
			t.Errorf("%s twice", key)
		}
		out[key] = docs[0].Object
	}
	return out
}

// asHelmManagesThem are objects as the chart renders them: managed by Helm's release, not by
// an ApplySet of the launcher's, and the CRDs kept when the release is uninstalled.
func asHelmManagesThem(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		u = u.DeepCopy()
		labels := u.GetLabels()
		delete(labels, cli.ApplySetPartOfLabel)
		if _, ok := labels[v1alpha1.LabelAppManagedBy]; ok {
			labels[v1alpha1.LabelAppManagedBy] = "Helm"
		}
		u.SetLabels(labels)
		if u.GetKind() == "CustomResourceDefinition" {
			a := u.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[ResourcePolicyAnnotation] = "keep"
			u.SetAnnotations(a)
		}
		out = append(out, u)
	}
	return out
}

// TestHelmChartRendersWhatInstallApplies (issue 59): for each choice of install's options,
// the chart with the values Values gives renders the objects `launcher install` applies,
// field for field, but for who manages them (Helm's release, no ApplySet label) and the CRDs
// Helm keeps. And the chart refuses what it cannot install, naming the value.
func TestHelmChartRendersWhatInstallApplies(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name string
		opts cli.InstallOptions
	}{
		{name: "defaults"},
		{name: "a release from a registry of one's own, with Kueue, before 1.36", opts: cli.InstallOptions{
			Version: "v1.2.3", Registry: "registry.example.com/faultline/", WithoutRolesPolicy: true,
			Components: slices.Concat(cli.InstallComponents, cli.OptionalComponents),
		}},
		{name: "the agent alone, every image its own, a pseudo-version", opts: cli.InstallOptions{
			Components: []string{"agent"}, Version: "v0.0.0-20261207101010-0c723a2f1e2d+dirty",
			ControllerImage: "example.com/c:1", AgentImage: "example.com/a@sha256:0123", BarrierImage: "example.com/b:2",
			AgentDriverRoot: "/host/run/nvidia/driver",
		}},
		{name: "the agent's runtime and driver", opts: cli.InstallOptions{
			AgentDriverRoot: "/host/home/kubernetes/bin/nvidia", AgentCRIEndpoint: "unix:///host/run/crio/crio.sock",
		}},
		{name: "the CRDs and the Kueue RBAC", opts: cli.InstallOptions{Components: []string{"kueue", "crd"}}},
		{name: "the admission policies alone", opts: cli.InstallOptions{Components: []string{"admission"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := cli.Manifests(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := render(ch, "default", Values(tc.opts))
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			if diff := cmp.Diff(byName(t, asHelmManagesThem(want)), byName(t, got)); diff != "" {
				t.Errorf("the chart renders (+) what install does not apply (-):\n%s", diff)
			}
		})
	}

	vap, mutating := "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	if _, err := render(ch, "default", Values(cli.InstallOptions{}), vap, mutating); err != nil {
		t.Errorf("helm template for a cluster that serves MutatingAdmissionPolicy: %v", err)
	}
	for _, tc := range []struct {
		name, namespace string
		values          map[string]any
		apiVersions     []string
		want            string
	}{
		{name: "the roles policy where the cluster's kinds lack MutatingAdmissionPolicy", namespace: "default", values: Values(cli.InstallOptions{}),
			apiVersions: []string{vap}, want: "set rolesPolicy=false"},
		{name: "a misspelt value", namespace: "default", values: map[string]any{"compnents": map[string]any{"kueue": true}},
			want: "compnents"},
		{name: "a value of the wrong type", namespace: "default", values: map[string]any{"components": map[string]any{"kueue": "yes"}},
			want: "/components/kueue"},
		{name: "the release in the namespace the chart creates", namespace: v1alpha1.NodeAgentNamespace, values: Values(cli.InstallOptions{}),
			want: "keep the release in another namespace"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, err := render(ch, tc.namespace, tc.values, tc.apiVersions...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestChartIsGenerated: the chart in the tree is what Files makes of deploy/, so that an edit
// of a manifest reaches the chart (`make generate`).
func TestChartIsGenerated(t *testing.T) {
	files, err := Files("", "")
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	err = filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range onDisk {
		if _, ok := files[name]; !ok && name != "README.md" {
			t.Errorf("%s/%s is not the generator's: run make generate", Dir, name)
		}
	}
	// Every value is documented in the chart's README.
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range leafKeys("", Values(cli.InstallOptions{})) {
		if !strings.Contains(string(readme), "| `"+key+"` |") {
			t.Errorf("%s/README.md has no row for the value %s", Dir, key)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from what the manifests make (%v): run make generate", Dir, name, err)
		}
	}
}

// leafKeys are the dotted paths of values' leaves.
func leafKeys(prefix string, values map[string]any) []string {
	var out []string
	for k, v := range values {
		if m, ok := v.(map[string]any); ok {
			out = append(out, leafKeys(prefix+k+".", m)...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}
