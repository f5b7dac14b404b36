// Package jaxplugin is the JAX framework plugin: the variables a pod needs for
// jax.distributed.initialize, and JAX's failure hints.
//
// # What JAX reads
//
// jax.distributed.initialize (jax/_src/distributed.py, State.initialize) reads
// JAX_COORDINATOR_ADDRESS from the environment when coordinator_address is not passed
// (and JAX_LOCAL_DEVICE_IDS, JAX_COORDINATOR_BIND_ADDRESS, JAX_PARTITION_INDEX). It does
// not read the process count or id from the environment: those come from the arguments
// or from a detected cluster environment (jax/_src/clusters/cluster.py,
// ClusterEnv.auto_detect_unset_distributed_params). On Kubernetes, K8sCluster
// (jax/_src/clusters/k8s_cluster.py) is detected only when the `kubernetes` Python package
// is installed (jax[k8s]); it then asks the API server for the pod and its Job (the pod's
// service account needs read access to pods and jobs) and uses JOB_COMPLETION_INDEX and
// the Job's parallelism. A faultline run satisfies it (an Indexed Job named after the run,
// parallelism = workers, subdomain = the run's headless Service), but nothing requires it.
//
// So the plugin sets:
//
//	JAX_COORDINATOR_ADDRESS  <run>-0.<run>.<namespace>.svc:<port>  read by JAX itself
//	JAX_NUM_PROCESSES        <workers>                              for the program
//	JAX_PROCESS_ID           $(FAULTLINE_INDEX)                     for the program
//
// and asks the controller (framework.Rendezvous.ReadJobAndPods) to give the run's pods a
// service account of their own, <run>-workers, whose Role allows exactly what K8sCluster
// calls: list the namespace's pods (_pod, by the pod's IP) and get the run's Job (_job).
// (Its _headless_svc, a list of services, runs only for a pod without a subdomain; a
// faultline pod always has one.) With jax[k8s] installed, a bare
//
//	jax.distributed.initialize()
//
// then works: the coordinator is JAX_COORDINATOR_ADDRESS (the environment wins over the
// '<job>-0.<subdomain>:55527' K8sCluster would derive), the process count the Job's
// parallelism (the run's workers) and the process id JOB_COMPLETION_INDEX (the
// completion index). Without jax[k8s], or to skip the API calls, pass the values and turn
// the detection off:
//
//	jax.distributed.initialize(
//	    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
//	    process_id=int(os.environ["JAX_PROCESS_ID"]),
//	    cluster_detection_method="deactivate")
//
// (cluster_detection_method="deactivate" matters where jax[k8s] is installed and the pod
// has no token, e.g. a template with its own service account and
// automountServiceAccountToken false: local_device_ids is unset, so JAX would still try the
// detection, and K8sCluster.is_env_present fails loading the in-cluster config.
// JAX_NUM_PROCESSES and JAX_PROCESS_ID are the names launchers such as XPK use; JAX itself
// does not read them.) A template that names its own service account keeps it: the
// controller then creates nothing, and that account needs the same two grants for the
// bare call.
//
// Process 0 runs the coordination service; every process must reach it, and every
// process dies when any does, so the restart scope is Gang.
//
// # frameworkOptions
//
//	port  the coordinator's port (default 1234, the port of JAX's documentation)
package jaxplugin

import (
	"context"
	"fmt"
	"strconv"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Names of the plugin, its options and the variables it sets.
const (
	Name = "jax"

	OptionPort = "port"

	EnvCoordinatorAddress = "JAX_COORDINATOR_ADDRESS"
	EnvNumProcesses       = "JAX_NUM_PROCESSES"
	EnvProcessID          = "JAX_PROCESS_ID"

	DefaultPort = 1234
	portName    = "jax-coord"
)

// Plugin implements framework.Plugin for JAX.
type Plugin struct {
	// Version is the plugin's release.
	Version string
}

var _ framework.Plugin = Plugin{}

// Info describes the plugin.
func (p Plugin) Info(context.Context) (framework.Info, error) {
	return framework.Info{
		Name:                Name,
		Version:             p.Version,
		APIVersion:          framework.APIVersion,
		DefaultRestartScope: v1alpha1.RestartScopeGang,
		DefaultPorts:        []framework.Port{{Name: portName, Port: DefaultPort}},
	}, nil
}

// Rendezvous returns the coordinator address, the process count and the process id.
func (Plugin) Rendezvous(_ context.Context, run framework.RunSpec) (framework.Rendezvous, error) {
	port := int32(DefaultPort)
	for k, v := range run.Options {
		if k != OptionPort {
			return framework.Rendezvous{}, framework.InvalidOptions("frameworkOptions.%s is not a jax option (known: %s)", k, OptionPort)
		}
		p, err := strconv.ParseInt(v, 10, 32)
		if err != nil || p < 1 || p > 65535 {
			return framework.Rendezvous{}, framework.InvalidOptions("frameworkOptions.port %q is not a port number (1-65535)", v)
		}
		port = int32(p)
	}
	if run.Workers < 1 {
		return framework.Rendezvous{}, framework.InvalidOptions("spec.workers is %d; JAX needs at least one process", run.Workers)
	}
	return framework.Rendezvous{
		Env: []framework.EnvVar{
			{Name: EnvCoordinatorAddress, Value: fmt.Sprintf("%s:%d", run.Address(0), port)},
			{Name: EnvNumProcesses, Value: strconv.Itoa(int(run.Workers))},
			{Name: EnvProcessID, Value: framework.IndexRef},
		},
		Ports: []framework.Port{{Name: portName, Port: port}},
		// For a bare jax.distributed.initialize() (see the package doc).
		ReadJobAndPods: true,
	}, nil
}

// FailureHints returns JAX's hints.
func (Plugin) FailureHints(context.Context) ([]framework.HintPattern, error) {
	return Hints(), nil
}
