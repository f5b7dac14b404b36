// Package tfplugin is the TensorFlow framework plugin: it sets TF_CONFIG, the environment
// variable that tf.distribute's TFConfigClusterResolver reads, for the two multi-worker
// strategies, and states TensorFlow's failure hints.
//
// # frameworkOptions
//
//	strategy   multi-worker-mirrored (default) or parameter-server
//	ps         number of parameter servers (parameter-server only, at least 1)
//	evaluator  0 (default) or 1: a sidecar evaluator (parameter-server only)
//	port       port of every task's tf.distribute.Server (default 2222)
//
// With parameter-server the chief is always one pod (TensorFlow allows at most one), and
// the pods that are neither the chief, a parameter server nor the evaluator are the workers:
// spec.workers (every pod) is 1 + ps + evaluator + the number of workers, at least one.
//
// # MultiWorkerMirroredStrategy
//
// Every pod is a worker and its task index is its completion index, so TF_CONFIG is
// complete in every pod:
//
//	{"cluster":{"worker":["r-0.r.ns.svc:2222","r-1.r.ns.svc:2222"]},"task":{"type":"worker","index":1}}
//
// The index is written $(FAULTLINE_INDEX) and expanded by the kubelet. Worker 0 is the
// chief (MultiWorkerMirroredStrategy's rule when the cluster has no "chief" job). Use the
// default restart scope, Gang: the strategy does not survive the loss of a worker.
//
// # ParameterServerStrategy
//
// The pods play TensorFlow's roles, laid out in index order: index 0 is the chief (the
// coordinator, which runs the training program), indexes 1..ps the parameter servers, then
// the workers, and last the evaluator when asked for. Every pod's TF_CONFIG has its real
// task, so a stock program needs nothing of faultline:
//
//	{"cluster":{"chief":["r-0.r.ns.svc:2222"],"ps":["r-1.r.ns.svc:2222","r-2.r.ns.svc:2222"],
//	 "worker":["r-3.r.ns.svc:2222","r-4.r.ns.svc:2222"]},"task":{"type":"ps","index":1},"rpc_layer":"grpc"}
//
//	resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
//	if resolver.task_type in ("worker", "ps"):
//	    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
//	        task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True).join()
//	elif resolver.task_type == "evaluator":
//	    ...  # tf.keras.utils.SidecarEvaluator on the chief's checkpoints
//	else:
//	    strategy = tf.distribute.ParameterServerStrategy(resolver)
//
// A pod's task type and its index within the type are not a substitution of its completion
// index (worker 0 is pod ps+1), so the plugin answers the layout as Roles (plugin API
// version 3): the faultline-roles admission policy labels each pod with its role and role
// index when it is created, the controller gives every container FAULTLINE_ROLE and
// FAULTLINE_ROLE_INDEX from those labels, and the task is written
// {"type":"$(FAULTLINE_ROLE)","index":$(FAULTLINE_ROLE_INDEX)}, which the kubelet expands
// to the pod's own. The evaluator has a task and is not in "cluster": it is no part of the
// training cluster, and TensorFlow allows it to be missing there and at most one of it
// (multi_worker_util.py, _validate_cluster_spec); ParameterServerStrategy accepts only
// chief, worker and ps in its cluster (parameter_server_strategy_v2.py, ALLOWED_TASK_TYPES).
// "rpc_layer":"grpc" is the protocol the servers speak (TFConfigClusterResolver.rpc_layer).
//
// Every pod also gets GRPC_FAIL_FAST=use_caller, which TensorFlow's parameter server
// tutorial sets so that a lost worker or parameter server is reported to the coordinator
// instead of hanging its RPCs.
//
// Parameter servers and workers never exit (they block in server.join()), so the run
// succeeds when the chief does: the plugin's default success policy is Leader, with the
// chief at index 0, and the Job's success policy stops the rest. The restart scope stays
// Gang: the coordinator does not survive the loss of a parameter server, nor the servers
// the loss of their coordinator.
package tfplugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
)

// Names of the plugin, its options and the variables it sets.
const (
	Name = "tensorflow"

	OptionStrategy  = "strategy"
	OptionPS        = "ps"
	OptionEvaluator = "evaluator"
	OptionPort      = "port"

	StrategyMultiWorkerMirrored = "multi-worker-mirrored"
	StrategyParameterServer     = "parameter-server"

	// EnvTFConfig is TensorFlow's cluster description.
	EnvTFConfig = "TF_CONFIG"
	// EnvGRPCFailFast makes gRPC calls fail at once on a lost peer rather than wait for it;
	// "use_caller" is what TensorFlow's parameter server tutorial sets.
	EnvGRPCFailFast = "GRPC_FAIL_FAST"
	GRPCFailFast    = "use_caller"

	// TensorFlow's task types, which are also the roles' names.
	TaskChief     = "chief"
	TaskPS        = "ps"
	TaskWorker    = "worker"
	TaskEvaluator = "evaluator"

	// DefaultPort is tf.distribute.Server's customary port.
	DefaultPort = 2222
	portName    = "tf-server"
)

var strategies = []string{StrategyMultiWorkerMirrored, StrategyParameterServer}

// Plugin implements framework.Plugin for TensorFlow.
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

// Rendezvous returns TF_CONFIG; for parameter-server also GRPC_FAIL_FAST, the roles and the
// Leader success policy.
func (Plugin) Rendezvous(_ context.Context, run framework.RunSpec) (framework.Rendezvous, error) {
	o, err := parseOptions(run)
	if err != nil {
		return framework.Rendezvous{}, err
	}
	ports := []framework.Port{{Name: portName, Port: o.port}}
	if o.strategy == StrategyParameterServer {
		roles := o.roles(run.Workers)
		cfg, err := parameterServerConfig(run, roles, o.port)
		if err != nil {
			return framework.Rendezvous{}, err
		}
		return framework.Rendezvous{
			Env:           []framework.EnvVar{{Name: EnvTFConfig, Value: cfg}, {Name: EnvGRPCFailFast, Value: GRPCFailFast}},
			Ports:         ports,
			Roles:         roles,
			SuccessPolicy: v1alpha1.SuccessPolicyLeader,
		}, nil
	}
	cfg, err := multiWorkerConfig(run, o.port)
	if err != nil {
		return framework.Rendezvous{}, err
	}
	return framework.Rendezvous{Env: []framework.EnvVar{{Name: EnvTFConfig, Value: cfg}}, Ports: ports}, nil
}

// FailureHints returns TensorFlow's hints.
func (Plugin) FailureHints(context.Context) ([]framework.HintPattern, error) {
	return Hints(), nil
}

type options struct {
	strategy  string
	ps        int32
	evaluator int32
	port      int32
}

// roles is the parameter-server layout of a run of workers pods: the chief at index 0 (the
// Leader success policy's index), the parameter servers, the workers, the evaluator last.
func (o options) roles(workers int32) []framework.Role {
	roles := []framework.Role{
		{Name: TaskChief, Replicas: 1},
		{Name: TaskPS, Replicas: o.ps},
		{Name: TaskWorker, Replicas: workers - 1 - o.ps - o.evaluator},
	}
	if o.evaluator > 0 {
		roles = append(roles, framework.Role{Name: TaskEvaluator, Replicas: o.evaluator})
	}
	return roles
}

func parseOptions(run framework.RunSpec) (options, error) {
	o := options{strategy: StrategyMultiWorkerMirrored, port: DefaultPort}
	known := []string{OptionEvaluator, OptionPort, OptionPS, OptionStrategy}
	for k := range run.Options {
		if !slices.Contains(known, k) {
			return o, framework.InvalidOptions("frameworkOptions.%s is not a tensorflow option (known: %s)", k, strings.Join(known, ", "))
		}
	}
	if s, ok := run.Options[OptionStrategy]; ok {
		if !slices.Contains(strategies, s) {
			return o, framework.InvalidOptions("frameworkOptions.strategy %q is not one of %s", s, strings.Join(strategies, ", "))
		}
		o.strategy = s
	}
	if s, ok := run.Options[OptionPort]; ok {
		port, err := strconv.ParseInt(s, 10, 32)
		if err != nil || port < 1 || port > 65535 {
			return o, framework.InvalidOptions("frameworkOptions.port %q is not a port number (1-65535)", s)
		}
		o.port = int32(port)
	}
	if run.Workers < 1 {
		return o, framework.InvalidOptions("spec.workers is %d; TensorFlow needs at least one worker", run.Workers)
	}
	if o.strategy != StrategyParameterServer {
		for _, k := range []string{OptionPS, OptionEvaluator} {
			if _, ok := run.Options[k]; ok {
				return o, framework.InvalidOptions("frameworkOptions.%s applies only to strategy %s; set frameworkOptions.strategy=%s or remove it", k, StrategyParameterServer, StrategyParameterServer)
			}
		}
		return o, nil
	}
	s, hasPS := run.Options[OptionPS]
	if !hasPS {
		return o, framework.InvalidOptions("strategy %s needs frameworkOptions.ps, the number of parameter servers", StrategyParameterServer)
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return o, framework.InvalidOptions("frameworkOptions.ps %q is not a positive number", s)
	}
	o.ps = int32(n)
	if s, ok := run.Options[OptionEvaluator]; ok {
		// TensorFlow allows at most one evaluator (multi_worker_util.py).
		if s != "0" && s != "1" {
			return o, framework.InvalidOptions("frameworkOptions.evaluator %q is neither 0 nor 1: TensorFlow runs at most one evaluator", s)
		}
		o.evaluator = int32(s[0] - '0')
	}
	// The chief, the parameter servers, the evaluator, and at least one worker.
	if need := int64(1) + int64(o.ps) + int64(o.evaluator) + 1; need > int64(run.Workers) {
		evaluator := ""
		if o.evaluator > 0 {
			evaluator = ", the evaluator"
		}
		return o, framework.InvalidOptions("strategy %s with frameworkOptions.ps=%d needs spec.workers of at least %d (the chief, the parameter servers%s and a worker), but spec.workers is %d; raise spec.workers or lower frameworkOptions.ps",
			StrategyParameterServer, o.ps, need, evaluator, run.Workers)
	}
	return o, nil
}

// checkSize refuses a TF_CONFIG that no pod could start with: Linux limits one
// environment string to 128 KiB, and every worker's address is in it.
func checkSize(run framework.RunSpec, cfg string) error {
	const maxArgStrlen = 32 * 4096
	if n := len(EnvTFConfig) + 1 + len(cfg) + 1; n > maxArgStrlen {
		return framework.InvalidOptions("TF_CONFIG for %d workers would be %d bytes, over the %d bytes Linux allows for one environment variable; use fewer workers or a shorter run name", run.Workers, n, maxArgStrlen)
	}
	return nil
}

func address(run framework.RunSpec, index int, port int32) string {
	return fmt.Sprintf("%s:%d", run.Address(index), port)
}
