package install

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/faultline-dev/faultline/pkg/cli"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2EInstallWaitsForItsPoliciesInForce (issue 59): launcher install's wait covers the
// admission policies: it says each is in force once a binding names it and the API server
// has type-checked its expressions, and fails naming a policy that no binding names, or
// whose expressions do not type-check against the cluster's API.
func TestE2EInstallWaitsForItsPoliciesInForce(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stdout, stderr, code := launcher(ctx, t, c, "install", "--components", "crd,admission", "--without-roles-policy", "--timeout", "1m")
	uninstallAtEnd(t, c)
	if code != 0 {
		t.Fatalf("install --components crd,admission: exit %d\n%s%s", code, stdout, stderr)
	}
	objs, err := cli.Manifests(cli.InstallOptions{Components: []string{"admission"}, WithoutRolesPolicy: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, u := range objs {
		if u.GetKind() == "ValidatingAdmissionPolicy" {
			n++
			if want := "validatingadmissionpolicy/" + u.GetName() + " in force"; !strings.Contains(stdout, want) {
				t.Errorf("install does not say %q:\n%s", want, stdout)
			}
		}
	}
	if n == 0 {
		t.Fatal("the admission component has no ValidatingAdmissionPolicy")
	}

	for _, tc := range []struct {
		name, expression string
		bind             bool
		want             []string
	}{
		{name: "faultline-test-unbound", expression: "true", want: []string{"validatingadmissionpolicy faultline-test-unbound", "no ValidatingAdmissionPolicyBinding names it"}},
		{name: "faultline-test-mistyped", expression: "object.spec.noSuchField == 'x'", bind: true,
			want: []string{"validatingadmissionpolicy faultline-test-mistyped", "do not type-check", "noSuchField"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := policyOn(tc.name, "", "pods", tc.expression)
			api := c.Client.AdmissionregistrationV1()
			if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = api.ValidatingAdmissionPolicies().Delete(context.Background(), tc.name, metav1.DeleteOptions{})
			})
			if tc.bind {
				// Bound to a namespace no pod is ever created in: the policy decides nothing here.
				binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
					ObjectMeta: metav1.ObjectMeta{Name: tc.name},
					Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: tc.name,
						ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit},
						MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
							MatchLabels: map[string]string{"faultline.test/none": "x"}}}},
				}
				if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = api.ValidatingAdmissionPolicyBindings().Delete(context.Background(), tc.name, metav1.DeleteOptions{})
				})
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(policy)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = cli.WaitReady(ctx, c.Client, []*unstructured.Unstructured{{Object: m}}, time.Minute, &out)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("the wait for policy %s: %v, want an error with %q", tc.name, err, want)
				}
			}
		})
	}
}
