package trust

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/test/cluster"
)

// TestE2ETenantCannotForgeDeviceHealth (issue 58): a worker's device health, the kubelet's
// allocatedResourcesStatus (KEP-4680), is evidence the node agent attests as a GPU fault, so
// only the kubelet of the pod's node may write it. A tenant with the edit role and, beyond
// it, the right to write its pods' status, is refused with a message that names the field and
// who writes it; so is the cluster admin; the kubelet of the pod's node writes it.
func TestE2ETenantCannotForgeDeviceHealth(t *testing.T) {
	t.Parallel()
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	tr := runAsTenant(ctx, t, c, ns, "device-health")
	asTenant, tenantUser, victim := tr.client, tr.user, tr.victim

	// Beyond the edit role: the pods' status in its namespace.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pods-status"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "patch", "update"}}}}
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-pods-status"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: ns}}}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	container := victim.Status.ContainerStatuses[0].Name
	unhealthy := []byte(fmt.Sprintf(`{"status":{"containerStatuses":[{"name":%q,"allocatedResourcesStatus":[{"name":%q,"resources":[{"resourceID":"GPU-forged","health":"Unhealthy"}]}]}]}}`,
		container, v1alpha1.ResourceGPU))
	field := "allocatedResourcesStatus"
	// The tenant's status write is authorized once its role binding has reached the
	// authorizer's cache; then admission refuses it, and says why.
	var err error
	if werr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = asTenant.Status().Patch(ctx, victim.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, unhealthy))
		return err == nil || !isRBACDenial(err), nil
	}); werr != nil {
		t.Fatalf("the tenant's pods/status role never took effect: %v", err)
	}
	requireForbidden(t, "tenant writing its worker's device health", err, field, "only the kubelet of the pod's node", tenantUser, "may not add, change or remove it")
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.StrategicMergePatchType, unhealthy, metav1.PatchOptions{}, "status")
	requireForbidden(t, "the admin writing a worker's device health", err, field, "only the kubelet of the pod's node")

	// The kubelet of the pod's node writes it.
	kubeletCfg := rest.CopyConfig(c.Config)
	kubeletCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + victim.Spec.NodeName, Groups: []string{"system:nodes", "system:authenticated"}}
	kubelet, err := kubernetes.NewForConfig(kubeletCfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kubelet.CoreV1().Pods(ns).Patch(ctx, victim.Name, types.StrategicMergePatchType, unhealthy, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("the kubelet of node %s writing its pod's device health: %v", victim.Spec.NodeName, err)
	}
	if rs := got.Status.ContainerStatuses[0].AllocatedResourcesStatus; len(rs) != 1 || rs[0].Resources[0].Health != "Unhealthy" {
		t.Errorf("after the kubelet's write: allocatedResourcesStatus %+v", rs)
	}
}

// isRBACDenial: the authorizer refused the request (403 "cannot patch resource"), as opposed
// to an admission policy's 403, which names its rule.
func isRBACDenial(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot patch resource")
}
