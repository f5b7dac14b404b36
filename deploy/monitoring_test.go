package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestMonitoringComponent: deploy/monitoring is an optional kustomize Component. Added to a
// kustomization beside deploy/, it builds, and brings a metrics Service for the controller and
// one for the node agents, each selecting the pods of deploy/ by a port they declare, a
// ServiceMonitor for each Service, and the Grafana dashboard as a ConfigMap for Grafana's
// sidecar, equal to dashboard.json. deploy/ alone, and what `launcher install` embeds, has
// none of it.
func TestMonitoringComponent(t *testing.T) {
	if _, err := fs.Stat(FS, "monitoring"); err == nil {
		t.Error("deploy/monitoring is embedded: `launcher install` would apply a ServiceMonitor on clusters without the Prometheus Operator")
	}
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// Kustomize takes no absolute path: the overlay names deploy/ relative to itself.
	rel, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel + "\ncomponents:\n- " + filepath.Join(rel, "monitoring") + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(dir string) map[string]map[string][]byte {
		t.Helper()
		res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		out := map[string]map[string][]byte{}
		for _, r := range res.Resources() {
			b, err := r.AsYAML()
			if err != nil {
				t.Fatal(err)
			}
			if out[r.GetKind()] == nil {
				out[r.GetKind()] = map[string][]byte{}
			}
			out[r.GetKind()][r.GetName()] = b
		}
		return out
	}
	plain := build(abs)
	for _, kind := range []string{"ServiceMonitor", "Service", "ConfigMap"} {
		if len(plain[kind]) > 0 {
			t.Errorf("deploy/ alone has %s %v: the monitoring kit must stay optional", kind, plain[kind])
		}
	}
	got := build(overlay)
	decode := func(b []byte, into runtime.Object) {
		t.Helper()
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	var ctrl appsv1.Deployment
	decode(got["Deployment"]["faultline-controller"], &ctrl)
	var agent appsv1.DaemonSet
	decode(got["DaemonSet"]["faultline-nodeagent"], &agent)
	for svcName, tmpl := range map[string]corev1.PodTemplateSpec{"faultline-controller-metrics": ctrl.Spec.Template, "faultline-nodeagent-metrics": agent.Spec.Template} {
		b, ok := got["Service"][svcName]
		if !ok {
			t.Errorf("no Service %s", svcName)
			continue
		}
		var svc corev1.Service
		decode(b, &svc)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(tmpl.Labels)) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selects %v, not the pods (%v)", svcName, svc.Spec.Selector, tmpl.Labels)
		}
		for _, p := range svc.Spec.Ports {
			found := false
			for _, c := range tmpl.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == p.TargetPort.String()
				}
			}
			if !found {
				t.Errorf("Service %s targets port %q, which the pods do not declare", svcName, p.TargetPort.String())
			}
		}
	}
	for _, name := range []string{"faultline-controller", "faultline-nodeagent"} {
		if _, ok := got["ServiceMonitor"][name]; !ok {
			t.Errorf("no ServiceMonitor %s", name)
		}
	}
	var cm corev1.ConfigMap
	decode(got["ConfigMap"]["faultline-dashboard"], &cm)
	want, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Data["faultline.json"] != string(want) || cm.Namespace != "faultline-system" {
		t.Errorf("dashboard ConfigMap: labels %v, namespace %q, %d bytes of faultline.json; want grafana_dashboard=1 in faultline-system and dashboard.json (%d bytes)",
			cm.Labels, cm.Namespace, len(cm.Data["faultline.json"]), len(want))
	}
}
