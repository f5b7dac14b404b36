package install

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	"helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/pkg/helmchart"
	"github.com/faultline-dev/faultline/test/cluster"
)

// helmNamespace keeps the release's record: the chart creates faultline-system itself.
const helmNamespace = "default"

// helmConfig is Helm's action configuration for the cluster, its warnings in the test's log.
func helmConfig(t *testing.T, c *cluster.Cluster) *action.Configuration {
	t.Helper()
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.Kubeconfig
	ns := helmNamespace
	flags.Namespace = &ns
	if err := cfg.Init(flags, helmNamespace, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// chartOf is the tree's chart as release v (vX.Y.Z) of faultline would ship it.
func chartOf(t *testing.T, v string) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join("..", "..", "..", helmchart.Dir))
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = helmchart.ChartVersion(v), v
	return ch
}

// TestE2EHelmInstallAndUpgrade (issue 59): the chart installs and upgrades with Helm's own Go
// SDK against the real API server. On this cluster (no MutatingAdmissionPolicy API) the
// defaults are refused before anything is applied, naming the value; with rolesPolicy=false
// release v0.1.0 installs every object `launcher install` would, managed by Helm's release,
// with its version's images; the upgrade to v0.2.0 moves the images, sets the agent's driver
// root and deletes the component it no longer has (Kueue's RBAC); helm uninstall removes
// all but the CRDs, which it keeps with the runs.
func TestE2EHelmInstallAndUpgrade(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := helmConfig(t, c)
	get := liveObjects(ctx, t, c)
	install := func(v string, o cli.InstallOptions) (*releasev1.Release, error) {
		i := action.NewInstall(cfg)
		i.ReleaseName, i.Namespace, i.Timeout = "faultline", helmNamespace, 2*time.Minute
		// No waiting for the rollouts: the images are nowhere (registry.invalid).
		i.WaitStrategy = kube.HookOnlyStrategy
		r, err := i.RunWithContext(ctx, chartOf(t, v), helmchart.Values(o))
		rel, _ := r.(*releasev1.Release)
		return rel, err
	}
	before := faultlineObjects(ctx, t, c)

	// The defaults, on a cluster without MutatingAdmissionPolicy: refused, nothing applied.
	if _, err := install("v0.1.0", cli.InstallOptions{}); err == nil || !strings.Contains(err.Error(), "set rolesPolicy=false") {
		t.Fatalf("helm install of the defaults on a cluster without MutatingAdmissionPolicy: %v, want a refusal naming rolesPolicy=false", err)
	}
	if got := faultlineObjects(ctx, t, c); !slices.Equal(got, before) {
		t.Fatalf("the refused install applied something: before %v, after %v", before, got)
	}

	v1 := cli.InstallOptions{Version: "v0.1.0", Registry: "registry.invalid/faultline", WithoutRolesPolicy: true,
		Components: slices.Concat(cli.InstallComponents, cli.OptionalComponents)}
	rel, err := install("v0.1.0", cli.InstallOptions{Registry: v1.Registry, WithoutRolesPolicy: true, Components: v1.Components})
	if err != nil {
		t.Fatalf("helm install v0.1.0: %v", err)
	}
	// Cleanups run last first: Helm's record goes, then launcher uninstall ends what helm
	// uninstall keeps (the CRDs) and anything a failure left.
	uninstallAtEnd(t, c)
	t.Cleanup(func() {
		u := action.NewUninstall(cfg)
		u.IgnoreNotFound, u.WaitStrategy = true, kube.HookOnlyStrategy
		if _, err := u.Run("faultline"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	if rel.Info.Status != common.StatusDeployed || rel.Version != 1 {
		t.Errorf("the release after install: revision %d, %s", rel.Version, rel.Info.Status)
	}
	installed, err := cli.Manifests(v1)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range installed {
		live := get(u)
		if live == nil {
			t.Errorf("%s %s: not installed", u.GetKind(), u.GetName())
			continue
		}
		if l, a := live.GetLabels(), live.GetAnnotations(); l[v1alpha1.LabelAppManagedBy] != "Helm" || l[v1alpha1.LabelAppVersion] != "v0.1.0" ||
			a["meta.helm.sh/release-name"] != "faultline" || a["meta.helm.sh/release-namespace"] != helmNamespace {
			t.Errorf("%s %s: labels %v, annotations %v: want Helm's release faultline's, of v0.1.0", u.GetKind(), u.GetName(), l, a)
		}
	}
	deployment := &unstructured.Unstructured{}
	deployment.SetAPIVersion("apps/v1")
	deployment.SetKind("Deployment")
	deployment.SetNamespace(v1alpha1.NodeAgentNamespace)
	deployment.SetName("faultline-controller")
	daemonSet := deployment.DeepCopy()
	daemonSet.SetKind("DaemonSet")
	daemonSet.SetName(v1alpha1.NodeAgentName)
	container := func(u *unstructured.Unstructured) (image string, args []string) {
		t.Helper()
		cs, _, _ := unstructured.NestedSlice(get(u).Object, "spec", "template", "spec", "containers")
		if len(cs) == 0 {
			t.Fatalf("%s %s has no container", u.GetKind(), u.GetName())
		}
		first := cs[0].(map[string]any)
		args, _, _ = unstructured.NestedStringSlice(first, "args")
		return first["image"].(string), args
	}
	if image, args := container(deployment); image != "registry.invalid/faultline/faultline:v0.1.0" || !slices.Contains(args, "--barrier-image=registry.invalid/faultline/faultline-barrier:v0.1.0") {
		t.Errorf("the controller of v0.1.0: image %s, args %v", image, args)
	}

	// The upgrade: the next version, Kueue's RBAC dropped, the agent's driver root set.
	v2 := cli.InstallOptions{Version: "v0.2.0", Registry: v1.Registry, WithoutRolesPolicy: true, AgentDriverRoot: "/host/run/nvidia/driver"}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout, up.WaitStrategy = helmNamespace, 2*time.Minute, kube.HookOnlyStrategy
	r, err := up.RunWithContext(ctx, "faultline", chartOf(t, "v0.2.0"), helmchart.Values(cli.InstallOptions{Registry: v2.Registry, WithoutRolesPolicy: true, AgentDriverRoot: v2.AgentDriverRoot}))
	if err != nil {
		t.Fatalf("helm upgrade to v0.2.0: %v", err)
	}
	if rel := r.(*releasev1.Release); rel.Info.Status != common.StatusDeployed || rel.Version != 2 {
		t.Errorf("the release after the upgrade: revision %d, %s", rel.Version, rel.Info.Status)
	}
	upgraded, err := cli.Manifests(v2)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range upgraded {
		if live := get(u); live == nil || live.GetLabels()[v1alpha1.LabelAppVersion] != "v0.2.0" {
			t.Errorf("%s %s after the upgrade: %v, want it of v0.2.0", u.GetKind(), u.GetName(), live)
		}
	}
	for _, u := range installed {
		if u.GetLabels()[v1alpha1.LabelAppComponent] == "kueue" && get(u) != nil {
			t.Errorf("%s %s of the dropped component kueue: still there after the upgrade", u.GetKind(), u.GetName())
		}
	}
	if image, args := container(deployment); image != "registry.invalid/faultline/faultline:v0.2.0" || !slices.Contains(args, "--barrier-image=registry.invalid/faultline/faultline-barrier:v0.2.0") {
		t.Errorf("the controller of v0.2.0: image %s, args %v", image, args)
	}
	if image, args := container(daemonSet); image != "registry.invalid/faultline/faultline-nodeagent:v0.2.0" || !slices.Contains(args, "--driver-root=/host/run/nvidia/driver") {
		t.Errorf("the agent of v0.2.0: image %s, args %v", image, args)
	}

	// helm uninstall: all gone but the CRDs, and with them the runs.
	u := action.NewUninstall(cfg)
	u.WaitStrategy, u.Timeout = kube.StatusWatcherStrategy, 2*time.Minute
	if _, err := u.Run("faultline"); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	for _, o := range upgraded {
		kept := get(o) != nil
		if crd := o.GetKind() == "CustomResourceDefinition"; kept != crd {
			t.Errorf("%s %s after helm uninstall: there %v, want %v", o.GetKind(), o.GetName(), kept, crd)
		}
	}
}
