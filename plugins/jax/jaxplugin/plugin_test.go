package jaxplugin

import (
	"context"
	"net"
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

func makeRun(name string, workers int32, opts map[string]string) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-b"},
		Spec: v1alpha1.TrainingRunSpec{
			Framework: Name, FrameworkOptions: opts, Workers: workers, RestartScope: v1alpha1.RestartScopeGang,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "jax"}}}},
		},
	}
}

// podEnv is the environment of the process with this index as the kubelet makes it: the
// Job built by the controller's code with the plugin's env (through the host, over gRPC),
// the completion-index annotation resolved, $(VAR) expanded.
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

func TestEnvGolden(t *testing.T) {
	run := makeRun("lm", 4, nil)
	for i := range 4 {
		env := podEnv(t, run, i)
		want := map[string]string{
			EnvCoordinatorAddress: "lm-0.lm.team-b.svc:1234",
			EnvNumProcesses:       "4",
			EnvProcessID:          strconv.Itoa(i),
		}
		got := map[string]string{}
		for k := range want {
			got[k] = env[k]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pod %d (-want +got):\n%s", i, diff)
		}
	}
}

// TestEnvIsWhatJAXReads checks the variables against what jax.distributed.initialize does
// with them (jax/_src/distributed.py, State.initialize):
//   - coordinator_address = os.environ.get('JAX_COORDINATOR_ADDRESS'): "host:port", whose
//     port the coordinator binds on every interface ('[::]:' + rsplit(':', 1)[1]);
//   - process_id and num_processes must be ints with 0 <= process_id < num_processes,
//     and the process ids of a job a dense range 0..num_processes-1; process 0 runs the
//     coordination service, so the address must be process 0's.
//
// JAX_NUM_PROCESSES and JAX_PROCESS_ID are not read by JAX (the program passes them, see
// the package doc); JAX's own Kubernetes detection (jax/_src/clusters/k8s_cluster.py,
// K8sCluster.get_process_id) uses JOB_COMPLETION_INDEX, the same completion index.
func TestEnvIsWhatJAXReads(t *testing.T) {
	const workers = 5
	run := makeRun("run-x", workers, map[string]string{OptionPort: "8476"})
	seen := map[int]bool{}
	var coordinator string
	for i := range workers {
		env := podEnv(t, run, i)
		host, port, err := net.SplitHostPort(env[EnvCoordinatorAddress])
		if err != nil {
			t.Fatalf("pod %d: %s %q is not host:port: %v", i, EnvCoordinatorAddress, env[EnvCoordinatorAddress], err)
		}
		if port != "8476" {
			t.Errorf("pod %d: coordinator port %q", i, port)
		}
		// Process 0's stable name: <run>-0.<run>.<namespace>.svc (package rendezvous).
		if host != "run-x-0.run-x.team-b.svc" {
			t.Errorf("pod %d: coordinator host %q is not process 0's", i, host)
		}
		if coordinator == "" {
			coordinator = env[EnvCoordinatorAddress]
		} else if env[EnvCoordinatorAddress] != coordinator {
			t.Errorf("pod %d: coordinator %q, pod 0 has %q", i, env[EnvCoordinatorAddress], coordinator)
		}
		n, err := strconv.Atoi(env[EnvNumProcesses])
		if err != nil || n != workers {
			t.Errorf("pod %d: %s = %q", i, EnvNumProcesses, env[EnvNumProcesses])
		}
		id, err := strconv.Atoi(env[EnvProcessID])
		if err != nil || id < 0 || id >= n {
			t.Errorf("pod %d: %s = %q, want an int in [0, %d)", i, EnvProcessID, env[EnvProcessID], n)
		}
		if id != i {
			t.Errorf("pod %d has process id %d", i, id)
		}
		seen[id] = true
	}
	if len(seen) != workers {
		t.Errorf("process ids %v are not a dense 0..%d", seen, workers-1)
	}
}

func TestInvalidOptions(t *testing.T) {
	cases := map[string]struct {
		opts map[string]string
		want string
	}{
		"unknown option": {map[string]string{"coordinator": "x"}, "frameworkOptions.coordinator is not a jax option (known: port)"},
		"bad port":       {map[string]string{OptionPort: "http"}, `frameworkOptions.port "http" is not a port number`},
		"port zero":      {map[string]string{OptionPort: "0"}, `frameworkOptions.port "0" is not a port number`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plugin{}.Rendezvous(context.Background(), framework.SpecOf(makeRun("r", 2, tc.opts)))
			if !framework.IsInvalidOptions(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an OptionsError containing %q", err, tc.want)
			}
		})
	}
}

func TestInfo(t *testing.T) {
	info, err := Plugin{Version: "v9"}.Info(context.Background())
	want := framework.Info{Name: "jax", Version: "v9", APIVersion: framework.APIVersion, DefaultRestartScope: v1alpha1.RestartScopeGang, DefaultPorts: []framework.Port{{Name: "jax-coord", Port: 1234}}}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("Info (-want +got):\n%s", diff)
	}
}

// TestHints: JAX's hints against real messages (each case names its upstream source), in
// the order the host tries them.
func TestHints(t *testing.T) {
	hinttest.Run(t, Name, Hints(), map[string]hinttest.Case{
		"another process died (JAX's fault tolerance guide)": {
			Source: "jax docs/fault_tolerance.rst; xla/tsl/distributed_runtime/coordination/coordination_service.cc (CheckHeartbeatTimeout)",
			Message: "E0926 17:26:32.075402  157988 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error from this or another task).\n" +
				"F0926 17:26:32.075587  157988 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; " +
				"see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. " +
				"absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n/job:jax_worker/replica:0/task:3\n" +
				"The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "jax_worker:3",
		},
		"JAX 0.11: another process crashed, and the survivor's all-gather failed first": {
			Source: "xla/pjrt/distributed/coordination/coordination_service.cc (CheckHeartbeatTimeout); gloo/transport/tcp/pair.cc; fixture jax-0.11.2-cpu-worker2-exits",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:6051\n" +
				"E1127 02:27:02.731775    2348 coordination_service_agent.cc:288] Polled an error from coordination service (this can be an error from this or another task).\n" +
				"F1127 02:27:02.731976    2348 client.h:86] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that " +
				"another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. " +
				"absl::Status: INTERNAL: Shutdown barrier has failed.\nBarrier result: 'INTERNAL: Barrier failed because: task is set to ERROR: UNAVAILABLE: Task 2 " +
				"heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.",
			Want:  v1alpha1.CausePeerFailure,
			Named: "2",
		},
		"JAX 0.11, CPU: a gloo collective lost its peer": {
			Source:  "gloo/transport/tcp/pair.cc (Pair::read); jax/experimental/multihost_utils.py; fixture jax-0.11.2-cpu-worker2-exits",
			Message: "ValueError: UNKNOWN: Gloo AllGather failed: [external/xla++third_party_ext+gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:6051",
			Want:    v1alpha1.CausePeerFailure,
		},
		"process 0, the coordinator, died (JAX's fault tolerance guide)": {
			Source: "jax docs/fault_tolerance.rst; xla/tsl/distributed_runtime/coordination/coordination_service_error_util.cc",
			Message: "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; " +
				"see the other task logs for more details. absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted " +
				"unexpectedly or this task is experiencing network issues. Check earlier logs from 1) this task, 2) the leader (usually slice 0 task 0), and 3) cluster scheduler to debug further.\n" +
				"Additional GRPC error information from remote target coordination_service while calling /tensorflow.CoordinationService/PollForError:\n" +
				":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\", grpc_status:14}",
			Want: v1alpha1.CausePeerFailure,
		},
		"a restarted process met its predecessor's registration": {
			Source:  "xla/tsl/distributed_runtime/coordination/coordination_service.cc (TaskState::RecordHeartbeat)",
			Message: "jaxlib.xla_extension.XlaRuntimeError: ABORTED: /job:jax_worker/replica:0/task:2 Heartbeat: Incarnation ID mismatch: expecting 8357309125311455270 but got 1529413470372386390. The task has restarted and likely crashed earlier",
			Want:    v1alpha1.CausePeerFailure,
		},
		"NCCL lost a peer": {
			Source: "nccl src/misc/socket.cc (socketProgress); xla/service/gpu nccl ToStatus",
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/runtime/nccl_api.cc:518: NCCL operation ncclGroupEnd() failed: remote process exited or there was a network error. " +
				"Last NCCL warning(error) log entry (may be unrelated) 'socketProgress: Connection closed by remote peer 10.4.2.7<53422>'.",
			Want: v1alpha1.CausePeerFailure,
		},
		"illegal address": {
			Source:  "CUDA driver cuGetErrorName/cuGetErrorString via xla stream_executor",
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
			Want:    v1alpha1.CauseAppGPUError,
		},
		"the program's own fault wins over the gang's dying words after it": {
			Source: "CUDA driver; xla/tsl/distributed_runtime/coordination/coordination_service.cc",
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered\n" +
				"UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n/job:jax_worker/replica:0/task:1",
			Want: v1alpha1.CauseAppGPUError,
		},
		"the device-side assert of a custom kernel": {
			Source:  "CUDA runtime cudaGetErrorString (cudaErrorAssert) via xla",
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_ASSERT: device-side assert triggered",
			Want:    v1alpha1.CauseAppGPUError,
		},

		// Local errors and start-up problems: never a peer failure.
		"an application error": {
			Source:  "jax/_src/lax/lax.py (dot_general shape check)",
			Message: "TypeError: dot_general requires contracting dimensions to have the same shape, got (128,) and (64,).",
		},
		"this process's own error, wrapped by the fatal-errors line": {
			Source: "xla/tsl/distributed_runtime/coordination/coordination_service_agent.cc (StartPollingForError); coordination_service.cc (CheckBarrierTimeout)",
			Message: "E1121 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error from this or another task).\n" +
				"F1121 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; " +
				"see the other task logs for more details. absl::Status: DEADLINE_EXCEEDED: Barrier timed out. Id: checkpoint::0. This usually happens because a task " +
				"triggered the barrier too early or too slowly.",
		},
		"start-up with a wrong coordinator port": {
			Source: "xla/tsl/distributed_runtime/coordination/coordination_service_error_util.cc, around gRPC's connection failure",
			Message: "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted " +
				"unexpectedly or this task is experiencing network issues.\nAdditional GRPC error information from remote target coordination_service while calling " +
				"/tensorflow.CoordinationService/RegisterTask:\n:UNKNOWN:failed to connect to all addresses; last error: UNKNOWN: ipv4:10.96.4.17:1235: Failed to connect to remote host: Connection refused {grpc_status:14}",
		},
		"a bare NCCL system error is not a peer's fault": {
			Source:  "xla/service/gpu nccl ToStatus; nccl ncclGetErrorString (ncclSystemError)",
			Message: "XlaRuntimeError: INTERNAL: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error (run with NCCL_DEBUG=INFO for details). Last NCCL warning(error) log entry (may be unrelated) 'Error while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)'.",
		},
		"an uncorrectable ECC error is the node agent's to prove": {
			Source:  "CUDA driver cuGetErrorName (CUDA_ERROR_ECC_UNCORRECTABLE)",
			Message: "XlaRuntimeError: INTERNAL: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered",
		},
	}, nil)
}

// The whole env of every pod, as the kubelet makes it (testdata/env.golden; go test -update
// rewrites it).
func TestEnvGoldenFile(t *testing.T) {
	plugintest.Golden(t, filepath.Join("testdata", "env.golden"), plugintest.FormatEnvs(plugintest.PodEnvs(t, Plugin{}, makeRun("lm", 3, nil))))
}
