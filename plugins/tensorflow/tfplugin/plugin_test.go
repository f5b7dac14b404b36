package tfplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/attempt"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/expansion"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
	"github.com/faultline-dev/faultline/pkg/framework/plugintest"
)

// tfConfig is TF_CONFIG's documented schema (TFConfigClusterResolver): a cluster of task
// types, each a list of "host:port", and this process's task.
type tfConfig struct {
	Cluster map[string][]string `json:"cluster"`
	Task    *struct {
		Type  string `json:"type"`
		Index *int   `json:"index"`
	} `json:"task"`
	RPCLayer string `json:"rpc_layer"`
}

func makeRun(name string, workers int32, opts map[string]string) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: v1alpha1.TrainingRunSpec{
			Framework: Name, FrameworkOptions: opts, Workers: workers, RestartScope: v1alpha1.RestartScopeGang,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "tf"}}}},
		},
	}
}

// podEnv is the environment of the worker with this index as the kubelet makes it: the
// run's Job built by the controller's own code with the plugin's env (through the host,
// over gRPC), the completion-index annotation resolved, $(VAR) expanded.
func podEnv(t *testing.T, run *v1alpha1.TrainingRun, index int) map[string]string {
	t.Helper()
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{Version: "test"}})
	env, err := h.Rendezvous(context.Background(), run)
	if err != nil {
		t.Fatalf("Rendezvous: %v", err)
	}
	job := attempt.Job(run, attempt.Options{Attempt: 1, Env: env})
	vars, err := expansion.Worker(job.Spec.Template.Spec.Containers[0].Env, index)
	if err != nil {
		t.Fatal(err)
	}
	return vars
}

// parse decodes TF_CONFIG strictly: valid JSON, nothing outside the schema.
func parse(t *testing.T, raw string) tfConfig {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var cfg tfConfig
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("TF_CONFIG %s is not valid: %v", raw, err)
	}
	return cfg
}

func addr(run *v1alpha1.TrainingRun, i int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc:2222", run.Name, i, run.Name, run.Namespace)
}

func TestMultiWorkerMirroredGolden(t *testing.T) {
	run := makeRun("mnist", 3, nil)
	want := []string{
		`{"cluster":{"worker":["mnist-0.mnist.team-a.svc:2222","mnist-1.mnist.team-a.svc:2222","mnist-2.mnist.team-a.svc:2222"]},"task":{"type":"worker","index":0}}`,
		`{"cluster":{"worker":["mnist-0.mnist.team-a.svc:2222","mnist-1.mnist.team-a.svc:2222","mnist-2.mnist.team-a.svc:2222"]},"task":{"type":"worker","index":1}}`,
		`{"cluster":{"worker":["mnist-0.mnist.team-a.svc:2222","mnist-1.mnist.team-a.svc:2222","mnist-2.mnist.team-a.svc:2222"]},"task":{"type":"worker","index":2}}`,
	}
	for i, w := range want {
		if got := podEnv(t, run, i)[EnvTFConfig]; got != w {
			t.Errorf("pod %d TF_CONFIG:\n got %s\nwant %s", i, got, w)
		}
	}
}

// TestMultiWorkerMirroredSchema checks every pod's TF_CONFIG field by field against the
// schema: one "worker" job listing every pod's stable address in index order, and a task
// of type "worker" whose index is the pod's own and whose address is its own.
func TestMultiWorkerMirroredSchema(t *testing.T) {
	for _, workers := range []int32{1, 2, 8} {
		run := makeRun("r", workers, map[string]string{OptionStrategy: StrategyMultiWorkerMirrored})
		for i := range int(workers) {
			env := podEnv(t, run, i)
			cfg := parse(t, env[EnvTFConfig])
			if len(cfg.Cluster) != 1 || len(cfg.Cluster["worker"]) != int(workers) {
				t.Fatalf("workers=%d pod %d: cluster %v, want one worker job with %d tasks", workers, i, cfg.Cluster, workers)
			}
			for j, a := range cfg.Cluster["worker"] {
				if a != addr(run, j) {
					t.Errorf("worker %d address %q, want %q", j, a, addr(run, j))
				}
			}
			if cfg.Task == nil || cfg.Task.Type != "worker" || cfg.Task.Index == nil || *cfg.Task.Index != i {
				t.Errorf("workers=%d pod %d: task %+v, want worker %d", workers, i, cfg.Task, i)
			}
			if env[v1alpha1.EnvIndex] != strconv.Itoa(i) {
				t.Errorf("FAULTLINE_INDEX = %q", env[v1alpha1.EnvIndex])
			}
			for _, name := range []string{v1alpha1.EnvRole, EnvGRPCFailFast} {
				if _, ok := env[name]; ok {
					t.Errorf("%s set for multi-worker-mirrored", name)
				}
			}
		}
	}
}

// TestParameterServerLayout: every pod's TF_CONFIG, as the kubelet expands it once the
// roles policy labelled the pod, is TensorFlow's own for its task: the chief, the parameter
// servers and the workers in "cluster" in index order, the pod's task (whose address is the
// pod's own), gRPC; GRPC_FAIL_FAST=use_caller everywhere.
func TestParameterServerLayout(t *testing.T) {
	run := makeRun("ps-run", 6, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "2"})
	wantCluster := map[string][]string{
		"chief":  {addr(run, 0)},
		"ps":     {addr(run, 1), addr(run, 2)},
		"worker": {addr(run, 3), addr(run, 4), addr(run, 5)},
	}
	wantTasks := []struct {
		typ   string
		index int
	}{{"chief", 0}, {"ps", 0}, {"ps", 1}, {"worker", 0}, {"worker", 1}, {"worker", 2}}
	envs := plugintest.PodEnvs(t, Plugin{}, run)
	for i, want := range wantTasks {
		env := envs[i]
		cfg := parse(t, env[EnvTFConfig])
		if diff := cmp.Diff(wantCluster, cfg.Cluster); diff != "" {
			t.Errorf("pod %d cluster (-want +got):\n%s", i, diff)
		}
		if cfg.Task == nil || cfg.Task.Type != want.typ || cfg.Task.Index == nil || *cfg.Task.Index != want.index {
			t.Fatalf("pod %d: task %+v, want %s/%d", i, cfg.Task, want.typ, want.index)
		}
		if got := cfg.Cluster[cfg.Task.Type][*cfg.Task.Index]; got != addr(run, i) {
			t.Errorf("pod %d: its task %s/%d is at %s, not its own address %s", i, cfg.Task.Type, *cfg.Task.Index, got, addr(run, i))
		}
		if cfg.RPCLayer != "grpc" {
			t.Errorf("pod %d: rpc_layer %q, want grpc", i, cfg.RPCLayer)
		}
		if env[EnvGRPCFailFast] != "use_caller" {
			t.Errorf("pod %d: GRPC_FAIL_FAST=%q, want use_caller", i, env[EnvGRPCFailFast])
		}
	}
	// The exact text the kubelet makes of "$(FAULTLINE_ROLE)" and "$(FAULTLINE_ROLE_INDEX)".
	want := `{"cluster":{"chief":["ps-run-0.ps-run.team-a.svc:2222"],"ps":["ps-run-1.ps-run.team-a.svc:2222","ps-run-2.ps-run.team-a.svc:2222"],` +
		`"worker":["ps-run-3.ps-run.team-a.svc:2222","ps-run-4.ps-run.team-a.svc:2222","ps-run-5.ps-run.team-a.svc:2222"]},` +
		`"task":{"type":"ps","index":1},"rpc_layer":"grpc"}`
	if got := envs[2][EnvTFConfig]; got != want {
		t.Errorf("pod 2 TF_CONFIG:\n got %s\nwant %s", got, want)
	}
}

// TestParameterServerEvaluator: the evaluator is the last pod, has its task, and is not in
// "cluster" (multi_worker_util.py allows it missing; ParameterServerStrategy refuses any
// type but chief, worker and ps there).
func TestParameterServerEvaluator(t *testing.T) {
	run := makeRun("ev", 5, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "1", OptionEvaluator: "1"})
	envs := plugintest.PodEnvs(t, Plugin{}, run)
	wantCluster := map[string][]string{"chief": {addr(run, 0)}, "ps": {addr(run, 1)}, "worker": {addr(run, 2), addr(run, 3)}}
	for i, env := range envs {
		cfg := parse(t, env[EnvTFConfig])
		if diff := cmp.Diff(wantCluster, cfg.Cluster); diff != "" {
			t.Errorf("pod %d cluster (-want +got):\n%s", i, diff)
		}
	}
	cfg := parse(t, envs[4][EnvTFConfig])
	if cfg.Task == nil || cfg.Task.Type != "evaluator" || cfg.Task.Index == nil || *cfg.Task.Index != 0 {
		t.Errorf("pod 4: task %+v, want evaluator/0", cfg.Task)
	}
}

// TestParameterServerRolesAndSuccess: what the controller gets through the host: the roles
// in index order with the chief at index 0, and the Leader success policy (parameter servers
// and workers never exit; the Job's success policy on index 0 stops them). Multi-worker
// mirrored has neither.
func TestParameterServerRolesAndSuccess(t *testing.T) {
	res := plugintest.Resolve(t, Plugin{}, makeRun("r", 7, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "2", OptionEvaluator: "1"}))
	if got, want := framework.RoleRanges(res.Roles), "chief:0-0,ps:1-2,worker:3-5,evaluator:6-6"; got != want {
		t.Errorf("roles %s, want %s", got, want)
	}
	if res.SuccessPolicy != v1alpha1.SuccessPolicyLeader {
		t.Errorf("success policy %q, want Leader", res.SuccessPolicy)
	}
	mwms := plugintest.Resolve(t, Plugin{}, makeRun("r", 3, nil))
	if len(mwms.Roles) != 0 || mwms.SuccessPolicy != v1alpha1.SuccessPolicyAllWorkers {
		t.Errorf("multi-worker-mirrored: roles %v, success policy %q; want none and AllWorkers", mwms.Roles, mwms.SuccessPolicy)
	}
}

func TestPortOption(t *testing.T) {
	run := makeRun("r", 2, map[string]string{OptionPort: "9000"})
	cfg := parse(t, podEnv(t, run, 0)[EnvTFConfig])
	if got := cfg.Cluster["worker"][1]; got != "r-1.r.team-a.svc:9000" {
		t.Errorf("worker 1 = %q", got)
	}
	r, err := Plugin{}.Rendezvous(context.Background(), framework.SpecOf(run))
	if err != nil || len(r.Ports) != 1 || r.Ports[0].Port != 9000 {
		t.Errorf("ports = %+v, %v", r.Ports, err)
	}
}

func TestInvalidOptions(t *testing.T) {
	cases := map[string]struct {
		workers int32
		opts    map[string]string
		want    string
	}{
		"unknown option":         {2, map[string]string{"strategy": StrategyMultiWorkerMirrored, "stratgey": "x"}, "frameworkOptions.stratgey is not a tensorflow option (known: evaluator, port, ps, strategy)"},
		"unknown strategy":       {2, map[string]string{OptionStrategy: "mirrored"}, `frameworkOptions.strategy "mirrored" is not one of multi-worker-mirrored, parameter-server`},
		"ps without strategy":    {4, map[string]string{OptionPS: "1"}, "frameworkOptions.ps applies only to strategy parameter-server; set frameworkOptions.strategy=parameter-server or remove it"},
		"evaluator without ps":   {4, map[string]string{OptionEvaluator: "1"}, "frameworkOptions.evaluator applies only to strategy parameter-server"},
		"strategy without ps":    {4, map[string]string{OptionStrategy: StrategyParameterServer}, "needs frameworkOptions.ps"},
		"ps not a number":        {4, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "two"}, `frameworkOptions.ps "two" is not a positive number`},
		"ps zero":                {4, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "0"}, `frameworkOptions.ps "0" is not a positive number`},
		"two evaluators":         {6, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "1", OptionEvaluator: "2"}, `frameworkOptions.evaluator "2" is neither 0 nor 1`},
		"no room for a worker":   {3, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "2"}, "with frameworkOptions.ps=2 needs spec.workers of at least 4 (the chief, the parameter servers and a worker), but spec.workers is 3"},
		"no room with evaluator": {4, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "2", OptionEvaluator: "1"}, "needs spec.workers of at least 5 (the chief, the parameter servers, the evaluator and a worker), but spec.workers is 4"},
		"bad port":               {2, map[string]string{OptionPort: "70000"}, `frameworkOptions.port "70000" is not a port number`},
		"PS TF_CONFIG too large": {6000, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "4"}, "over the 131072 bytes Linux allows for one environment variable"},
		"TF_CONFIG too large":    {6000, nil, "over the 131072 bytes Linux allows for one environment variable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plugin{}.Rendezvous(context.Background(), framework.SpecOf(makeRun("r", tc.workers, tc.opts)))
			if !framework.IsInvalidOptions(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an OptionsError containing %q", err, tc.want)
			}
		})
	}
}

func TestInfo(t *testing.T) {
	info, err := Plugin{Version: "v9"}.Info(context.Background())
	want := framework.Info{Name: "tensorflow", Version: "v9", APIVersion: framework.APIVersion, DefaultRestartScope: v1alpha1.RestartScopeGang, DefaultPorts: []framework.Port{{Name: "tf-server", Port: 2222}}}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("Info (-want +got):\n%s", diff)
	}
}

// TestHints runs realistic termination messages (log tails) through the compiled hints;
// the first match decides, as in exitclass.
// TestHints: TensorFlow's hints against real messages (each case names its upstream
// source), in the order the host tries them.
func TestHints(t *testing.T) {
	const failureHandling = "tensorflow/python/distribute/failure_handling/failure_handling.py (PreemptionCheckpointHandler)"
	hinttest.Run(t, Name, Hints(), map[string]hinttest.Case{
		"this worker received the termination notice": {
			Source: failureHandling,
			Message: "I1121 10:00:01.000000 140 failure_handling.py:420] Member /job:worker/replica:0/task:1 has received termination notice.\n" +
				"I1121 10:00:03.000000 140 failure_handling.py:512] Termination caught in main thread on preempted worker\n" +
				"I1121 10:00:09.000000 140 failure_handling.py:488] PreemptionCheckpointHandler: checkpoint saved. Exiting.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the main thread caught the termination": {
			Source:  failureHandling,
			Message: "I1121 10:00:03.000000 140 failure_handling.py:512] Termination caught in main thread on preempted worker",
			Want:    v1alpha1.CausePeerFailure,
		},
		"checkpointed because another worker was told to stop": {
			Source:  failureHandling,
			Message: "I1121 10:00:08.000000 140 failure_handling.py:640] PreemptionCheckpointHandler: RUN_TO_CHECKPOINT set, preemption awareness acknowledged\nI1121 10:00:09.000000 140 failure_handling.py:488] PreemptionCheckpointHandler: checkpoint saved. Exiting.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a worker came back with a new incarnation (once \"Duplicate task registration\")": {
			Source:  "xla/tsl/distributed_runtime/coordination/coordination_service.cc (RegisterTaskAsync)",
			Message: "tensorflow.python.framework.errors_impl.AbortedError: /job:worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation. It has likely restarted.",
			Want:    v1alpha1.CausePeerFailure,
		},
		"the coordination service lost a worker": {
			Source:  "xla/tsl/distributed_runtime/coordination/coordination_service.cc (CheckHeartbeatTimeout)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
			Want:    v1alpha1.CausePeerFailure,
			Named:   "worker:1",
		},
		"MultiWorkerMirroredStrategy's health check found a peer down": {
			Source: "tensorflow/python/distribute/collective_all_reduce_strategy.py (_check_health)",
			Message: "ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:2 is down, aborting collectives: Deadline Exceeded\n" +
				"Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n:{\"created\":\"@1613785391.258566931\",\"description\":\"Deadline Exceeded\",\"grpc_status\":4}",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:2",
		},
		"a collective aborted by the health check": {
			Source: "tensorflow/python/distribute/collective_all_reduce_strategy.py (_check_health: abort_collective_ops); " +
				"tensorflow/core/common_runtime/base_collective_executor.cc (StartAbort)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: cluster check alive failed, /job:worker/replica:0/task:3 is down\n" +
				"The error could be from a previous operation. Restart your program to reset.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:3",
		},
		"a peer's server went away under a collective": {
			Source: "tensorflow/core/distributed_runtime/rpc/grpc_util.h (FromGrpcStatus); tensorflow/core/common_runtime/base_collective_executor.cc (StartAbort)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Socket closed\n" +
				"Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n" +
				":{\"created\":\"@1700000000.123456789\",\"description\":\"Error received from peer ipv4:10.4.2.7:2222\",\"file\":\"external/com_github_grpc_grpc/src/core/lib/surface/call.cc\",\"file_line\":1056,\"grpc_message\":\"Socket closed\",\"grpc_status\":14}",
			Want:  v1alpha1.CausePeerFailure,
			Named: "worker:2",
		},
		"the program's own fault wins over the peer messages after it": {
			Source: "CUDA runtime cudaGetErrorString; tensorflow grpc_util.h",
			Message: "tensorflow.python.framework.errors_impl.InternalError: CUDA error: an illegal memory access was encountered\n" +
				"UnavailableError: Socket closed\nAdditional GRPC error information from remote target /job:worker/replica:0/task:0:\n:{\"grpc_message\":\"Socket closed\",\"grpc_status\":14}",
			Want: v1alpha1.CauseAppGPUError,
		},

		// Local errors and start-up problems: never a peer failure.
		"an application error": {
			Source:  "keras/src/losses (shape check)",
			Message: "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: Shapes (None, 10) and (None, 1) are incompatible",
		},
		"a collective aborted by this worker's own error": {
			Source:  "tensorflow/core/common_runtime/base_collective_executor.cc (StartAbort)",
			Message: "tensorflow.python.framework.errors_impl.InvalidArgumentError: Collective ops is aborted by: Shape mismatch in the collective instance 100. Op at device /job:worker/replica:0/task:1/device:CPU:0 expected shape [10] but another member in the group expected the same key 100 with shape [20]",
		},
		"start-up with a wrong port: gRPC cannot connect": {
			Source: "tensorflow/core/distributed_runtime/rpc/grpc_util.h (FromGrpcStatus)",
			Message: "tensorflow.python.framework.errors_impl.UnavailableError: failed to connect to all addresses; last error: UNKNOWN: ipv4:10.96.4.17:2223: Failed to connect to remote host: Connection refused\n" +
				"Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling /tensorflow.eager.EagerService/CreateContext:\n:{\"grpc_message\":\"failed to connect to all addresses\",\"grpc_status\":14}",
		},
		"a bare NCCL system error (e.g. /dev/shm too small)": {
			Source:  "tensorflow/core/nccl/nccl_manager.cc; nccl ncclGetErrorString (ncclSystemError)",
			Message: "tensorflow.python.framework.errors_impl.InternalError: NCCL: unhandled system error (run with NCCL_DEBUG=INFO for details)",
		},
		"an uncorrectable ECC error is the node agent's to prove": {
			Source:  "CUDA runtime cudaGetErrorString (cudaErrorECCUncorrectable)",
			Message: "tensorflow.python.framework.errors_impl.InternalError: CUDA error: uncorrectable ECC error encountered",
		},
	}, append(terminationHints(), clusterCheck()))
}

// The hints survive the host's own checks (and compile there), over gRPC.
func TestHintsThroughTheHost(t *testing.T) {
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{}})
	hints, err := h.Hints(context.Background(), makeRun("r", 1, nil))
	if err != nil || len(hints) != len(Hints()) {
		t.Fatalf("Hints through the host: %d, %v", len(hints), err)
	}
	var b bytes.Buffer
	for _, hint := range hints {
		fmt.Fprintf(&b, "%s %s\n", hint.Cause, hint.Pattern)
	}
	if !strings.Contains(b.String(), "PeerFailure Member") {
		t.Errorf("hints:\n%s", b.String())
	}
}

// The whole env of every pod, as the kubelet makes it, for each layout and role
// (testdata/*.golden; go test -update rewrites them): multi-worker mirrored, and parameter
// server with its chief, parameter servers, workers and evaluator, each pod labelled as the
// roles policy labels it.
func TestEnvGoldenFile(t *testing.T) {
	for name, run := range map[string]*v1alpha1.TrainingRun{
		"env":              makeRun("mnist", 3, nil),
		"parameter-server": makeRun("ctr", 7, map[string]string{OptionStrategy: StrategyParameterServer, OptionPS: "2", OptionEvaluator: "1"}),
	} {
		t.Run(name, func(t *testing.T) {
			plugintest.Golden(t, filepath.Join("testdata", name+".golden"), plugintest.FormatEnvs(plugintest.PodEnvs(t, Plugin{}, run)))
		})
	}
}

// TestParameterServerConfigPassesTensorFlowsChecks: every pod's TF_CONFIG, for layouts with
// and without an evaluator, passes the checks TensorFlow makes of it, as written upstream:
// tensorflow/python/distribute/multi_worker_util.py (_validate_cluster_spec: a known task
// type, in the cluster unless it is the evaluator, at most one chief and one evaluator, the
// task id within its type) and parameter_server_strategy_v2.py (ALLOWED_TASK_TYPES: only
// chief, worker and ps in the cluster; a ps and a worker job).
func TestParameterServerConfigPassesTensorFlowsChecks(t *testing.T) {
	for _, opts := range []map[string]string{
		{OptionStrategy: StrategyParameterServer, OptionPS: "1"},
		{OptionStrategy: StrategyParameterServer, OptionPS: "3", OptionEvaluator: "0"},
		{OptionStrategy: StrategyParameterServer, OptionPS: "2", OptionEvaluator: "1"},
	} {
		for _, workers := range []int32{5, 9} {
			run := makeRun("r", workers, opts)
			for i, env := range plugintest.PodEnvs(t, Plugin{}, run) {
				cfg := parse(t, env[EnvTFConfig])
				where := fmt.Sprintf("%v workers=%d pod %d", opts, workers, i)
				for typ := range cfg.Cluster {
					if typ != "chief" && typ != "worker" && typ != "ps" {
						t.Errorf("%s: cluster has %q, which ParameterServerStrategy refuses", where, typ)
					}
				}
				if len(cfg.Cluster["ps"]) == 0 || len(cfg.Cluster["worker"]) == 0 || len(cfg.Cluster["chief"]) != 1 {
					t.Errorf("%s: cluster %v, want one chief, a ps job and a worker job", where, cfg.Cluster)
				}
				if cfg.Task == nil || cfg.Task.Index == nil {
					t.Fatalf("%s: no task", where)
				}
				switch typ, id := cfg.Task.Type, *cfg.Task.Index; {
				case typ != "chief" && typ != "worker" && typ != "evaluator" && typ != "ps":
					t.Errorf("%s: Unrecognized task_type: %q", where, typ)
				case typ == "evaluator" && id != 0:
					t.Errorf("%s: evaluator %d: there must be at most one", where, id)
				case typ != "evaluator" && id >= len(cfg.Cluster[typ]):
					t.Errorf("%s: the task_id %d exceeds the maximum id of %s", where, id, typ)
				}
			}
		}
	}
}
