package main

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
	"github.com/faultline-dev/faultline/pkg/framework/plugintest"
)

func makeRun(opts map[string]string) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "team-d"},
		Spec: v1alpha1.TrainingRunSpec{Framework: Name, Workers: 2, FrameworkOptions: opts,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "trainer", Image: "example",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}},
			}}}}},
	}
}

// The pods' env, as the kubelet makes it, through a real host over gRPC
// (plugin.TestPluginGRPCConn): testdata/env.golden (go test -update rewrites it).
func TestEnvGolden(t *testing.T) {
	plugintest.Golden(t, filepath.Join("testdata", "env.golden"), plugintest.FormatEnvs(plugintest.PodEnvs(t, Plugin{}, makeRun(nil))))
}

// The plugin's defaults take effect: the run sets no restart scope and the answer names no
// ports.
func TestDefaults(t *testing.T) {
	res := plugintest.Resolve(t, Plugin{}, makeRun(nil))
	if res.RestartScope != v1alpha1.RestartScopeGang || len(res.Ports) != 1 || res.Ports[0].ContainerPort != DefaultPort {
		t.Errorf("Resolved = %+v; want restart scope Gang and port %d", res, DefaultPort)
	}
}

func TestInvalidOptions(t *testing.T) {
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{}})
	_, err := h.Resolve(context.Background(), makeRun(map[string]string{OptionPort: "http"}))
	if !framework.IsInvalidOptions(err) || !strings.Contains(err.Error(), `frameworkOptions.port "http"`) {
		t.Errorf("err = %v, want the option named", err)
	}
}

func TestHints(t *testing.T) {
	hints, _ := Plugin{}.FailureHints(context.Background())
	hinttest.Run(t, Name, hints, map[string]hinttest.Case{
		"a peer died": {Source: "the example framework's coordinator", Message: "FATAL: lost contact with rank 3 (connection closed)", Want: v1alpha1.CausePeerFailure},
		"its own bug": {Source: "the example framework's program", Message: "panic: index out of range [7] with length 4"},
	}, hints)
}

// The binary, started as the controller starts it: handshake, version negotiation, gRPC.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the plugin binary; skipped with -short")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, framework.BinaryPrefix+Name), ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	h := framework.NewHost(framework.HostOptions{PluginDir: dir, PluginLog: io.Discard})
	defer h.Close()
	env, err := h.Rendezvous(context.Background(), makeRun(nil))
	if err != nil {
		t.Fatal(err)
	}
	if env[0].Name != EnvCoordinator || env[0].Value != "demo-0.demo.team-d.svc:7777" {
		t.Errorf("env = %+v", env)
	}
	info, err := h.Info(context.Background(), Name)
	if err != nil || info.APIVersion != framework.APIVersion {
		t.Errorf("Info = %+v, %v; want API version %d negotiated", info, err, framework.APIVersion)
	}
}
