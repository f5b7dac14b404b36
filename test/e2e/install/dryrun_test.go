package install

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EInstallDryRunAndDiffChangeNothing (issue 59): `launcher install --dry-run=server`
// has the API server check every object and stores none, on a cluster with nothing of
// faultline's (what goes into the namespace the install creates is said to be unchecked);
// once installed, `--diff` of the same install finds nothing and exits 0, and `--diff` of
// another registry shows the Deployment's image changing, as a unified diff, exits 3
// (ExitDiffers, as kubectl diff exits 1) and changes nothing either.
func TestE2EInstallDryRunAndDiffChangeNothing(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	before := faultlineObjects(ctx, t, c)
	stdout, stderr, code := launcher(ctx, t, c, "install", "--without-roles-policy", "--dry-run=server")
	if code != 0 {
		t.Fatalf("install --dry-run=server: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"customresourcedefinition.apiextensions.k8s.io/trainingruns.faultline.dev serverside-applied (server dry run)",
		"validatingadmissionpolicy.admissionregistration.k8s.io/faultline-evidence serverside-applied (server dry run)",
		"deployment.apps/faultline-controller would be created in namespace faultline-system, which this install creates",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the dry run does not say %q:\n%s", want, stdout)
		}
	}
	if after := faultlineObjects(ctx, t, c); !slices.Equal(before, after) {
		t.Fatalf("the dry run changed the cluster: %v, then %v", before, after)
	}

	if stdout, stderr, code := launcher(ctx, t, c, "install", "--without-roles-policy", "--registry", "registry.invalid/faultline", "--wait=false"); code != 0 {
		t.Fatalf("install: exit %d\n%s%s", code, stdout, stderr)
	}
	uninstallAtEnd(t, c)
	installed := faultlineObjects(ctx, t, c)
	stdout, stderr, code = launcher(ctx, t, c, "install", "--without-roles-policy", "--registry", "registry.invalid/faultline", "--diff")
	if code != 0 || strings.Contains(stdout, "--- live/") {
		t.Fatalf("install --diff of what is installed: exit %d, want 0 and no diff\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = launcher(ctx, t, c, "install", "--without-roles-policy", "--registry", "registry.example.com/mirror", "--diff")
	if code != cli.ExitDiffers {
		t.Fatalf("install --diff of another registry: exit %d, want %d\n%s%s", code, cli.ExitDiffers, stdout, stderr)
	}
	for _, want := range []string{
		"--- live/deployment.apps/faultline-controller",
		"+++ installed/deployment.apps/faultline-controller",
		"-        image: registry.invalid/faultline/faultline:",
		"+        image: registry.example.com/mirror/faultline:",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the diff does not say %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "live/customresourcedefinition") {
		t.Errorf("the diff shows a CRD that does not change:\n%s", stdout)
	}
	if after := faultlineObjects(ctx, t, c); !slices.Equal(installed, after) {
		t.Errorf("the diff changed the cluster: %v, then %v", installed, after)
	}
	dep, err := c.Client.AppsV1().Deployments("faultline-system").Get(ctx, "faultline-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, "registry.invalid/faultline/") {
		t.Errorf("the controller's image after --diff: %s, want the installed one", img)
	}
}
