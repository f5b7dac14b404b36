// Package torchplugin is the PyTorch framework plugin: the variables torchrun reads and
// those of torch.distributed's init_method="env://", and PyTorch's failure hints. It is
// written against the public plugin SDK only (pkg/framework and its subpackages), as a
// plugin in another repository would be.
//
// # What it sets
//
// torchrun (torch/distributed/run.py) reads every option from a PET_<OPTION> variable when
// the command line does not give it, so a pod's command can be just
//
//	torchrun train.py
//
// With the default static rendezvous (frameworkOptions.rendezvous static), every pod gets,
// as Kubeflow Trainer's Torch plugin sets them:
//
//	PET_NNODES          <workers>                         one torchrun per pod
//	PET_NPROC_PER_NODE  <GPUs per worker>                 see below
//	PET_NODE_RANK       $(FAULTLINE_INDEX)                the pod's completion index
//	PET_MASTER_ADDR     <run>-0.<run>.<namespace>.svc     pod 0 hosts the store
//	PET_MASTER_PORT     29500                             torchrun's default
//
// torchrun's static rendezvous (get_rdzv_endpoint: "<master_addr>:<master_port>") makes
// node rank r's workers the global ranks r*nproc .. r*nproc+nproc-1, so ranks follow
// completion indexes. With frameworkOptions.rendezvous c10d, PET_NODE_RANK and the master
// pair give way to
//
//	PET_RDZV_BACKEND    c10d
//	PET_RDZV_ENDPOINT   <run>-0.<run>.<namespace>.svc:29400
//	PET_RDZV_ID         <run>
//
// and the rendezvous, hosted by the torchrun of pod 0 (torch recognises the endpoint as its
// own address), hands out node ranks in the order the pods join.
//
// For a program started without torchrun, one process per pod calling
// init_process_group(init_method="env://"), every pod also gets
//
//	MASTER_ADDR  <run>-0.<run>.<namespace>.svc
//	MASTER_PORT  29500 (frameworkOptions.port)
//	WORLD_SIZE   <workers>
//	RANK         $(FAULTLINE_INDEX)
//
// torchrun sets these four itself for each worker it starts, so they never conflict with
// it. They count pods, as Kubeflow's PyTorchJob does: a program that starts several
// processes per pod without torchrun multiplies them itself.
//
// # Processes per pod
//
// PET_NPROC_PER_NODE is the number of GPUs the worker container asks for (the run's
// template, RunSpec.Worker): the sum of its extended resources whose name contains "gpu"
// (nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, ...) or names an NVIDIA MIG slice
// (nvidia.com/mig-*), and 1 for a pod without any. frameworkOptions.nprocPerNode overrides
// it with a number or one of torchrun's own words (gpu, auto, cpu, xpu), e.g. for GPUs
// handed out by dynamic resource allocation, which the template's resources do not show.
// A controller that speaks only plugin API version 1 does not say what the template asks
// for; the plugin then refuses the run unless nprocPerNode is set.
//
// # Restarts
//
// Every process of a PyTorch job waits for every other in each collective, so the restart
// scope is Gang. Leave torchrun's --max-restarts at 0 (its default): faultline restarts the
// whole gang itself, on a fresh attempt, and judges why each time.
//
// # frameworkOptions
//
//	rendezvous    static (default) or c10d
//	port          the master port of the static rendezvous and of env:// (default 29500)
//	rdzvPort      the c10d rendezvous port (default 29400; rendezvous c10d only)
//	nprocPerNode  processes per pod: a number or gpu, auto, cpu, xpu (default: GPUs per pod)
package torchplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Names of the plugin, its options and the variables it sets.
const (
	Name = "pytorch"

	OptionRendezvous   = "rendezvous"
	OptionPort         = "port"
	OptionRdzvPort     = "rdzvPort"
	OptionNprocPerNode = "nprocPerNode"

	RendezvousStatic = "static"
	RendezvousC10d   = "c10d"

	// The variables torchrun reads (torch/distributed/argparse_util.py: "PET_" and the
	// option's name in capitals).
	EnvNNodes       = "PET_NNODES"
	EnvNprocPerNode = "PET_NPROC_PER_NODE"
	EnvNodeRank     = "PET_NODE_RANK"
	EnvMasterAddr   = "PET_MASTER_ADDR"
	EnvMasterPort   = "PET_MASTER_PORT"
	EnvRdzvBackend  = "PET_RDZV_BACKEND"
	EnvRdzvEndpoint = "PET_RDZV_ENDPOINT"
	EnvRdzvID       = "PET_RDZV_ID"

	// The variables of init_method="env://" (torch/distributed/rendezvous.py).
	EnvMasterAddrEnv = "MASTER_ADDR"
	EnvMasterPortEnv = "MASTER_PORT"
	EnvWorldSize     = "WORLD_SIZE"
	EnvRank          = "RANK"

	// DefaultPort is torchrun's --master-port default; DefaultRdzvPort the default port of
	// its c10d rendezvous endpoint.
	DefaultPort     = 29500
	DefaultRdzvPort = 29400

	masterPortName = "torch-master"
	rdzvPortName   = "torch-rdzv"

	// maxNproc bounds nprocPerNode: far above any node's accelerators, low enough to catch
	// a typo before it starts a thousand processes.
	maxNproc = 1024
)

var (
	rendezvousBackends = []string{RendezvousStatic, RendezvousC10d}
	// nprocWords are the non-numeric values torchrun's --nproc-per-node accepts
	// (torch/distributed/run.py, determine_local_world_size).
	nprocWords = []string{"gpu", "auto", "cpu", "xpu"}
)

// Plugin implements framework.Plugin for PyTorch.
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
		DefaultPorts:        []framework.Port{{Name: masterPortName, Port: DefaultPort}},
	}, nil
}

// Rendezvous returns torchrun's and env://'s variables for the run.
func (Plugin) Rendezvous(_ context.Context, run framework.RunSpec) (framework.Rendezvous, error) {
	o, err := parseOptions(run)
	if err != nil {
		return framework.Rendezvous{}, err
	}
	master := run.Address(0)
	env := []framework.EnvVar{
		{Name: EnvNNodes, Value: strconv.Itoa(int(run.Workers))},
		{Name: EnvNprocPerNode, Value: o.nproc},
	}
	ports := []framework.Port{{Name: masterPortName, Port: o.port}}
	switch o.rendezvous {
	case RendezvousC10d:
		env = append(env,
			framework.EnvVar{Name: EnvRdzvBackend, Value: RendezvousC10d},
			framework.EnvVar{Name: EnvRdzvEndpoint, Value: fmt.Sprintf("%s:%d", master, o.rdzvPort)},
			framework.EnvVar{Name: EnvRdzvID, Value: run.Name},
		)
		ports = append(ports, framework.Port{Name: rdzvPortName, Port: o.rdzvPort})
	default:
		env = append(env,
			framework.EnvVar{Name: EnvNodeRank, Value: framework.IndexRef},
			framework.EnvVar{Name: EnvMasterAddr, Value: master},
			framework.EnvVar{Name: EnvMasterPort, Value: strconv.Itoa(int(o.port))},
		)
	}
	env = append(env,
		framework.EnvVar{Name: EnvMasterAddrEnv, Value: master},
		framework.EnvVar{Name: EnvMasterPortEnv, Value: strconv.Itoa(int(o.port))},
		framework.EnvVar{Name: EnvWorldSize, Value: strconv.Itoa(int(run.Workers))},
		framework.EnvVar{Name: EnvRank, Value: framework.IndexRef},
	)
	return framework.Rendezvous{Env: env, Ports: ports}, nil
}

// FailureHints returns PyTorch's hints.
func (Plugin) FailureHints(context.Context) ([]framework.HintPattern, error) {
	return Hints(), nil
}

type options struct {
	rendezvous string
	port       int32
	rdzvPort   int32
	nproc      string
}

func parseOptions(run framework.RunSpec) (options, error) {
	o := options{rendezvous: RendezvousStatic, port: DefaultPort, rdzvPort: DefaultRdzvPort}
	known := []string{OptionNprocPerNode, OptionPort, OptionRdzvPort, OptionRendezvous}
	for k := range run.Options {
		if !slices.Contains(known, k) {
			return o, framework.InvalidOptions("frameworkOptions.%s is not a pytorch option (known: %s)", k, strings.Join(known, ", "))
		}
	}
	if run.Workers < 1 {
		return o, framework.InvalidOptions("spec.workers is %d; PyTorch needs at least one node", run.Workers)
	}
	if s, ok := run.Options[OptionRendezvous]; ok {
		if !slices.Contains(rendezvousBackends, s) {
			return o, framework.InvalidOptions("frameworkOptions.rendezvous %q is not one of %s", s, strings.Join(rendezvousBackends, ", "))
		}
		o.rendezvous = s
	}
	var err error
	if o.port, err = portOption(run.Options, OptionPort, DefaultPort); err != nil {
		return o, err
	}
	if _, ok := run.Options[OptionRdzvPort]; ok && o.rendezvous != RendezvousC10d {
		return o, framework.InvalidOptions("frameworkOptions.rdzvPort applies only to rendezvous %s; remove it or set frameworkOptions.rendezvous: %s", RendezvousC10d, RendezvousC10d)
	}
	if o.rdzvPort, err = portOption(run.Options, OptionRdzvPort, DefaultRdzvPort); err != nil {
		return o, err
	}
	if o.rendezvous == RendezvousC10d && o.rdzvPort == o.port {
		return o, framework.InvalidOptions("frameworkOptions.rdzvPort and frameworkOptions.port are both %d; the c10d rendezvous and the master need ports of their own", o.port)
	}
	o.nproc, err = nprocPerNode(run)
	return o, err
}

func portOption(opts map[string]string, name string, def int32) (int32, error) {
	s, ok := opts[name]
	if !ok {
		return def, nil
	}
	p, err := strconv.ParseInt(s, 10, 32)
	if err != nil || p < 1 || p > 65535 {
		return 0, framework.InvalidOptions("frameworkOptions.%s %q is not a port number (1-65535)", name, s)
	}
	return int32(p), nil
}

// nprocPerNode is frameworkOptions.nprocPerNode, else the worker's GPUs (1 without any).
func nprocPerNode(run framework.RunSpec) (string, error) {
	if s, ok := run.Options[OptionNprocPerNode]; ok {
		if slices.Contains(nprocWords, s) {
			return s, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxNproc {
			return "", framework.InvalidOptions("frameworkOptions.nprocPerNode %q is neither a number of processes (1-%d) nor one of torchrun's %s", s, maxNproc, strings.Join(nprocWords, ", "))
		}
		return strconv.Itoa(n), nil
	}
	if run.Worker == nil {
		return "", framework.InvalidOptions("this controller does not tell plugins what a worker's template asks for (plugin API version 1), so the number of GPUs per pod is unknown; set frameworkOptions.nprocPerNode")
	}
	return strconv.FormatInt(max(GPUs(run.Worker.Devices), 1), 10), nil
}

// GPUs counts the GPUs among a worker's devices: extended resources whose name contains
// "gpu" (nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, ...) and NVIDIA MIG slices
// (nvidia.com/mig-1g.10gb, ...), each a device torch sees.
func GPUs(devices map[corev1.ResourceName]int64) int64 {
	var n int64
	for name, count := range devices {
		s := strings.ToLower(string(name))
		if strings.Contains(s, "gpu") || strings.HasPrefix(s, "nvidia.com/mig-") {
			n += count
		}
	}
	return n
}
