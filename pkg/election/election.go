// Package election decides, before the controller starts, where its leader-election Lease
// lives, and refuses a setting that cannot work with the flags that would make it work.
//
// Outside a cluster (`launcher controller --kubeconfig K` on a laptop) there is no pod
// namespace to put the Lease in, and controller-runtime stops with "unable to find leader
// election namespace", which names none of the launcher's flags. The controller does not
// fall back to running without election there: the usual reason to run one on a laptop is
// to debug against a cluster whose deployed controller is already leading, and a second
// controller outside the election would act on every run beside it — two deciders delete
// and recreate the same Job, and a restart is counted and started twice, which the
// persisted decision exists to prevent. So it refuses, and says which of two flags to pass:
// the deployed controller's Lease namespace, which makes this copy a harmless standby, or
// --leader-elect=false, a statement that no other controller acts on the cluster (a dev
// cluster, a test).
package election

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// The flags that the controller command binds to Config, named in the refusal.
const (
	FlagLeaderElect    = "leader-elect"
	FlagLeaseNamespace = "leader-election-namespace"
	FlagNamespace      = "namespace"
)

// InstallNamespace is where `launcher install` (deploy/controller) runs the controller and
// keeps its Lease: the namespace to join that controller's election from elsewhere.
const InstallNamespace = "faultline-system"

// PodNamespaceFile is where Kubernetes mounts a pod's own namespace; controller-runtime reads
// the same file when it is given no Lease namespace.
const PodNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Config is what the controller's flags say about the election.
type Config struct {
	// Enabled is --leader-elect.
	Enabled bool
	// LeaseNamespace is --leader-election-namespace ("" when not given).
	LeaseNamespace string
	// WatchNamespace is --namespace, the one namespace the controller watches ("": all).
	WatchNamespace string
}

// ErrNoLeaseNamespace is why the election cannot run: no flag names a namespace and the
// process is not in a pod.
var ErrNoLeaseNamespace = errors.New("no namespace for the leader-election Lease")

// LeaseNamespace returns the namespace of the controller's Lease: --leader-election-namespace,
// else --namespace (a controller of one namespace competes with the controllers of that
// namespace), else the namespace of the pod the process runs in, as podNamespace reads it
// ("" outside a pod). It returns "" when the election is off. Outside a pod with neither flag
// it returns an error wrapping ErrNoLeaseNamespace that says which flags to pass.
func LeaseNamespace(c Config, podNamespace func() (string, error)) (string, error) {
	if !c.Enabled {
		return "", nil
	}
	if c.LeaseNamespace != "" {
		return c.LeaseNamespace, nil
	}
	if c.WatchNamespace != "" {
		return c.WatchNamespace, nil
	}
	ns, err := podNamespace()
	if err != nil {
		return "", fmt.Errorf("leader election: read this pod's namespace: %w; pass --%s", err, FlagLeaseNamespace)
	}
	if ns != "" {
		return ns, nil
	}
	return "", fmt.Errorf("%w: this controller runs outside a cluster (there is no %s), so it has no namespace of its own.\n"+
		"Pass --%s=%s to stand by beside a controller installed by `launcher install` (it leads through a Lease there; use the namespace yours runs in),\n"+
		"or --%s=false if no other faultline controller acts on this cluster: two controllers without a shared Lease would both act on every run, restarting it twice",
		ErrNoLeaseNamespace, PodNamespaceFile, FlagLeaseNamespace, InstallNamespace, FlagLeaderElect)
}

// PodNamespace reads the namespace of the pod this process runs in from PodNamespaceFile:
// "" when there is none, i.e. outside a cluster.
func PodNamespace() (string, error) {
	b, err := os.ReadFile(PodNamespaceFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	ns := strings.TrimSpace(string(b))
	if ns == "" {
		return "", fmt.Errorf("%s is empty", PodNamespaceFile)
	}
	return ns, nil
}
