package install

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// launcher runs the launcher against the cluster and returns its output and exit code.
func launcher(ctx context.Context, t *testing.T, c *cluster.Cluster, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, launcherBin, append(args, "--kubeconfig", c.Kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("launcher %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), 0
}

// liveObjects returns a reader of the cluster's objects: the one an object of the manifests
// names, nil where there is none.
func liveObjects(ctx context.Context, t *testing.T, c *cluster.Cluster) func(*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		live, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		return live
	}
}

// policyOn is a ValidatingAdmissionPolicy named name of one expression, on the creation of
// resource of group (version v1 of the core group, any version of another).
func policyOn(name, group, resource, expression string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	version := "*"
	if group == "" {
		version = "v1"
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression}},
		},
	}
}

// uninstallAtEnd takes faultline out when the test ends (`launcher uninstall --force`), so
// that the next test finds the cluster bare whatever this one left.
func uninstallAtEnd(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if stdout, stderr, code := launcher(ctx, t, c, "uninstall", "--force"); code != 0 {
			t.Errorf("uninstall: exit %d\n%s%s", code, stdout, stderr)
		}
	})
}

// faultlineObjects lists what of faultline's the cluster holds: every object of the kinds
// `launcher install` applies whose name or namespace is faultline's, as "kind/name".
func faultlineObjects(ctx context.Context, t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas"},
		{Version: "v1", Resource: "namespaces"},
	} {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, u := range l.Items {
			if strings.Contains(u.GetName(), "faultline") {
				out = append(out, gvr.Resource+"/"+u.GetName())
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestE2EInstallPreflightRefusesAnOldCluster: on a control plane without the
// MutatingAdmissionPolicy API, `launcher install` applies nothing and says why: the API, the
// version that serves it, and the flag that installs without it.
func TestE2EInstallPreflightRefusesAnOldCluster(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := faultlineObjects(ctx, t, c)
	stdout, stderr, code := launcher(ctx, t, c, "install")
	if code == 0 {
		t.Fatalf("launcher install exited 0 on a cluster without MutatingAdmissionPolicy:\n%s%s", stdout, stderr)
	}
	for _, want := range []string{
		"MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is not served",
		"Kubernetes 1.36 and later serve it",
		"--runtime-config",
		"launcher install --without-roles-policy",
		"nothing was applied",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stdout, "serverside-applied") {
		t.Errorf("applied something before refusing:\n%s", stdout)
	}
	if after := faultlineObjects(ctx, t, c); !slices.Equal(before, after) {
		t.Errorf("the cluster changed: faultline's objects before %v, after %v", before, after)
	}
}

// TestE2EInstallWithoutTheRolesPolicyThenUninstall: the refusal's way out installs on that
// cluster, and `launcher uninstall` takes all of it out again: a run that has not finished is
// refused (nothing removed), --force ends it and removes everything, and does not say it is
// done while a worker of a run is still there (one held by another's finalizer: it names
// the pod and fails at its timeout).
func TestE2EInstallWithoutTheRolesPolicyThenUninstall(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	before := faultlineObjects(ctx, t, c)
	// --wait=false: the images are nowhere (registry.invalid); what is installed is the point.
	stdout, stderr, code := launcher(ctx, t, c, "install", "--without-roles-policy", "--registry", "registry.invalid/faultline", "--wait=false")
	if code != 0 {
		t.Fatalf("launcher install --without-roles-policy: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"preflight: Kubernetes " + c.Tools.KubernetesVersion(), "installing faultline", "registry.invalid/faultline/faultline-barrier:", "deployment.apps/faultline-controller serverside-applied"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("install's output lacks %q:\n%s", want, stdout)
		}
	}
	installed := faultlineObjects(ctx, t, c)
	if len(installed) <= len(before) {
		t.Fatalf("nothing installed: %v", installed)
	}

	// A run nobody has finished (no controller runs: its pods never start here).
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.KindTrainingRun,
		"metadata": map[string]any{"name": "left-running", "namespace": "default"},
		"spec": map[string]any{"framework": "jax", "workers": int64(1), "template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never", "containers": []any{map[string]any{"name": "w", "image": "worker"}},
		}}},
	}}
	runs := dyn.Resource(v1alpha1.GroupVersion.WithResource(v1alpha1.ResourceTrainingRun)).Namespace("default")
	created, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One of its workers, being deleted, which a finalizer of another's holds (as a kubelet's
	// graceful stop keeps a pod a while): uninstall must not say it is done while the pod is
	// there. No node matches it: kwok leaves it alone.
	held := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "left-running-0", Namespace: "default",
			Labels:     map[string]string{v1alpha1.LabelRun: created.GetName()},
			Finalizers: []string{"faultline.test/hold"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"faultline.test/none": "x"}, Containers: []corev1.Container{{Name: "w", Image: "worker"}}},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, held.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = launcher(ctx, t, c, "uninstall")
	if code == 0 || !strings.Contains(stderr, "trainingrun default/left-running") || !strings.Contains(stderr, "--force") {
		t.Fatalf("uninstall with a run not finished: exit %d, want a refusal naming the run and --force\n%s%s", code, stdout, stderr)
	}
	if got := faultlineObjects(ctx, t, c); !slices.Equal(got, installed) {
		t.Errorf("the refused uninstall removed something: before %v, after %v", installed, got)
	}

	stdout, stderr, code = launcher(ctx, t, c, "uninstall", "--force", "--timeout", "45s")
	if code == 0 || !strings.Contains(stderr, "pod default/left-running-0") {
		t.Fatalf("launcher uninstall --force with a worker held: exit %d, want a failure naming the pod\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if _, err := c.Client.CoreV1().Pods("default").Patch(ctx, held.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPods(ctx, "default", labels.SelectorFromSet(held.Labels), func(pods []*corev1.Pod) (bool, error) { return len(pods) == 0, nil }); err != nil {
		t.Fatalf("pod default/%s once released: %v", held.Name, err)
	}
	if !strings.Contains(stderr, "faultline is removed, but") {
		t.Errorf("uninstall's error does not say that faultline itself is removed:\n%s", stderr)
	}
	for _, want := range []string{"ending 1 not finished: trainingrun default/left-running", "customresourcedefinition.apiextensions.k8s.io/trainingruns.faultline.dev deleted"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("uninstall's output lacks %q:\n%s", want, stdout)
		}
	}
	if after := faultlineObjects(ctx, t, c); !slices.Equal(before, after) {
		t.Errorf("uninstall left: before the install %v, after the uninstall %v", before, after)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, v1alpha1.NodeAgentNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s: %v, want gone", v1alpha1.NodeAgentNamespace, err)
	}
}
