package install

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EUpgradePrunesWhatTheNewVersionDropped (issue 59): an upgrade takes out what the new
// version no longer has. The version before is this one's manifests with two objects more in
// its admission component's ApplySet: a policy (a kind the new version still has) and a
// ConfigMap (a kind it no longer has at all). `launcher install` of this version deletes both
// and says so, and touches nothing else: every object of this version stays, an object of the
// same kind that no install labelled (somebody's own) stays, and installing one component
// prunes nothing of another's.
func TestE2EUpgradePrunesWhatTheNewVersionDropped(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	opts := cli.InstallOptions{WithoutRolesPolicy: true, Registry: "registry.invalid/faultline"}
	objs, err := cli.Manifests(opts)
	if err != nil {
		t.Fatal(err)
	}
	inAdmission := map[string]string{"applyset.kubernetes.io/part-of": cli.ApplySetID("admission")}
	droppedPolicy := policyOn("faultline-dropped", "faultline.dev", "nodemaintenances", "true")
	droppedPolicy.Labels = inAdmission
	droppedKind := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "faultline-dropped", Namespace: v1alpha1.NodeAgentNamespace, Labels: inAdmission},
	}
	before := objs
	for _, o := range []runtime.Object{droppedPolicy, droppedKind} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, &unstructured.Unstructured{Object: m})
	}
	if err := cli.Apply(ctx, c.Config, before, io.Discard, cli.ApplyForReal); err != nil {
		t.Fatalf("install the version before: %v", err)
	}
	uninstallAtEnd(t, c)
	t.Cleanup(func() {
		_ = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), "users-own", metav1.DeleteOptions{})
	})
	// Somebody's own policy, of a kind the set holds, that no install labelled.
	own := droppedPolicy.DeepCopy()
	own.Name, own.Labels = "users-own", nil
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// One component: nothing of the admission component's is pruned.
	if stdout, stderr, code := launcher(ctx, t, c, "install", "--components", "crd", "--wait=false"); code != 0 || strings.Contains(stdout, "pruned") {
		t.Fatalf("install --components crd: exit %d, pruned something:\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code := launcher(ctx, t, c, "install", "--without-roles-policy", "--registry", opts.Registry, "--wait=false")
	if code != 0 {
		t.Fatalf("the upgrade: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"validatingadmissionpolicy.admissionregistration.k8s.io/faultline-dropped pruned",
		"configmap/faultline-dropped pruned",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the upgrade does not say %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, " pruned"); n != 2 {
		t.Errorf("the upgrade pruned %d objects, want 2:\n%s", n, stdout)
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, droppedPolicy.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dropped policy after the upgrade: %v, want it gone", err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps(v1alpha1.NodeAgentNamespace).Get(ctx, droppedKind.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap of a kind the version dropped, after the upgrade: %v, want it gone", err)
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, own.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("somebody's own policy after the upgrade: %v, want it kept", err)
	}
	get := liveObjects(ctx, t, c)
	for _, u := range objs {
		if get(u) == nil {
			t.Errorf("%s %s of this version: gone after the upgrade", u.GetKind(), u.GetName())
		}
	}
	// The parent names the kinds of now only: the ConfigMap's kind is gone from it.
	parent, err := c.Client.CoreV1().Secrets(v1alpha1.NodeAgentNamespace).Get(ctx, "faultline-applyset-admission", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kinds := strings.Split(parent.Annotations["applyset.kubernetes.io/contains-group-kinds"], ","); slices.Contains(kinds, "ConfigMap") || !slices.Contains(kinds, "ValidatingAdmissionPolicy.admissionregistration.k8s.io") {
		t.Errorf("the ApplySet's kinds after the upgrade: %v", kinds)
	}
}
