package torchplugin

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
	"github.com/faultline-dev/faultline/pkg/framework/plugintest"
)

// makeRun is a PyTorch run whose worker container asks for resources.
func makeRun(name string, workers int32, opts map[string]string, resources corev1.ResourceList) *v1alpha1.TrainingRun {
	return &v1alpha1.TrainingRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-c"},
		Spec: v1alpha1.TrainingRunSpec{
			Framework: Name, FrameworkOptions: opts, Workers: workers,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "trainer", Image: "pytorch", Command: []string{"torchrun", "train.py"},
				Resources: corev1.ResourceRequirements{Limits: resources},
			}}}},
		},
	}
}

func gpus(n string) corev1.ResourceList {
	return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n), corev1.ResourceCPU: resource.MustParse("32")}
}

// The whole env of every pod, as the kubelet makes it, for both rendezvous backends.
func TestEnvGolden(t *testing.T) {
	cases := map[string]*v1alpha1.TrainingRun{
		"static": makeRun("llm", 3, nil, gpus("8")),
		"c10d":   makeRun("llm", 2, map[string]string{OptionRendezvous: RendezvousC10d, OptionNprocPerNode: "4"}, nil),
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			plugintest.Golden(t, filepath.Join("testdata", name+".golden"), plugintest.FormatEnvs(plugintest.PodEnvs(t, Plugin{}, run)))
		})
	}
}

// TestEnvIsWhatTorchrunReads checks the static rendezvous against what torchrun makes of
// it (torch/distributed/run.py): every option from PET_<OPTION>; get_rdzv_endpoint joins
// master_addr and master_port; node_rank becomes the static rendezvous's rank, and node r's
// workers are the global ranks r*nproc_per_node .. +nproc_per_node-1, so every pod needs a
// distinct node rank in 0..nnodes-1 and the same master, pod 0, which hosts the store.
// init_method="env://" (torch/distributed/rendezvous.py) reads MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE and RANK, with 0 <= RANK < WORLD_SIZE.
func TestEnvIsWhatTorchrunReads(t *testing.T) {
	const workers = 4
	envs := plugintest.PodEnvs(t, Plugin{}, makeRun("gpt", workers, map[string]string{OptionPort: "23456"}, gpus("2")))
	globalRanks := map[int]bool{}
	for i, env := range envs {
		nnodes, _ := strconv.Atoi(env[EnvNNodes])
		nproc, _ := strconv.Atoi(env[EnvNprocPerNode])
		rank, err := strconv.Atoi(env[EnvNodeRank])
		if nnodes != workers || nproc != 2 || err != nil || rank != i {
			t.Errorf("pod %d: nnodes %q, nproc_per_node %q, node_rank %q; want %d, 2, %d", i, env[EnvNNodes], env[EnvNprocPerNode], env[EnvNodeRank], workers, i)
		}
		if got := env[EnvMasterAddr] + ":" + env[EnvMasterPort]; got != "gpt-0.gpt.team-c.svc:23456" {
			t.Errorf("pod %d: rendezvous endpoint %q, want pod 0's", i, got)
		}
		for local := range nproc {
			globalRanks[rank*nproc+local] = true
		}
		if env[EnvRdzvBackend] != "" {
			t.Errorf("pod %d: %s=%q; the static rendezvous is torchrun's default", i, EnvRdzvBackend, env[EnvRdzvBackend])
		}
		world, _ := strconv.Atoi(env[EnvWorldSize])
		r, err := strconv.Atoi(env[EnvRank])
		if world != workers || err != nil || r != i || env[EnvMasterAddrEnv] != "gpt-0.gpt.team-c.svc" || env[EnvMasterPortEnv] != "23456" {
			t.Errorf("pod %d: env:// MASTER_ADDR=%q MASTER_PORT=%q WORLD_SIZE=%q RANK=%q", i, env[EnvMasterAddrEnv], env[EnvMasterPortEnv], env[EnvWorldSize], env[EnvRank])
		}
	}
	if len(globalRanks) != workers*2 || !globalRanks[0] || !globalRanks[workers*2-1] {
		t.Errorf("global ranks %v are not a dense 0..%d", globalRanks, workers*2-1)
	}
}

// TestC10d: the c10d rendezvous needs one endpoint (pod 0's, which torch recognises as its
// own address and hosts there), one run id shared by every node, and no node rank (the
// rendezvous assigns them).
func TestC10d(t *testing.T) {
	envs := plugintest.PodEnvs(t, Plugin{}, makeRun("gpt", 3, map[string]string{OptionRendezvous: RendezvousC10d, OptionRdzvPort: "29555"}, gpus("8")))
	for i, env := range envs {
		want := map[string]string{EnvRdzvBackend: "c10d", EnvRdzvEndpoint: "gpt-0.gpt.team-c.svc:29555", EnvRdzvID: "gpt", EnvNNodes: "3", EnvNprocPerNode: "8"}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("pod %d: %s=%q, want %q", i, k, env[k], v)
			}
		}
		if _, ok := env[EnvNodeRank]; ok {
			t.Errorf("pod %d sets %s under c10d, where the rendezvous assigns node ranks", i, EnvNodeRank)
		}
	}
	res := plugintest.Resolve(t, Plugin{}, makeRun("gpt", 3, map[string]string{OptionRendezvous: RendezvousC10d}, nil))
	want := []corev1.ContainerPort{
		{Name: "torch-master", ContainerPort: DefaultPort, Protocol: corev1.ProtocolTCP},
		{Name: "torch-rdzv", ContainerPort: DefaultRdzvPort, Protocol: corev1.ProtocolTCP},
	}
	if diff := cmp.Diff(want, res.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if res.RestartScope != v1alpha1.RestartScopeGang {
		t.Errorf("restart scope %q, want the plugin's default Gang for a run that sets none", res.RestartScope)
	}
}

// PET_NPROC_PER_NODE follows the worker's GPUs, as the host reports them over gRPC.
func TestNprocPerNode(t *testing.T) {
	cases := map[string]struct {
		resources corev1.ResourceList // limits
		requests  corev1.ResourceList
		opts      map[string]string
		dra       *v1alpha1.GPUClaim // spec.gpus
		want      string
	}{
		"GPUs through DRA":        {dra: &v1alpha1.GPUClaim{DeviceClassName: "gpu.nvidia.com", Count: 4}, want: "4"},
		"8 NVIDIA GPUs":           {resources: gpus("8"), want: "8"},
		"AMD GPUs":                {resources: corev1.ResourceList{"amd.com/gpu": resource.MustParse("4")}, want: "4"},
		"MIG slices":              {resources: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2"), "nvidia.com/mig-2g.20gb": resource.MustParse("1")}, want: "3"},
		"CPU only":                {resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}, want: "1"},
		"other devices only":      {resources: corev1.ResourceList{"example.com/fpga": resource.MustParse("2")}, want: "1"},
		"the option wins":         {resources: gpus("8"), opts: map[string]string{OptionNprocPerNode: "2"}, want: "2"},
		"torchrun's own word":     {resources: gpus("8"), opts: map[string]string{OptionNprocPerNode: "gpu"}, want: "gpu"},
		"requests without limits": {requests: gpus("2"), want: "2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := makeRun("r", 1, tc.opts, tc.resources)
			run.Spec.Template.Spec.Containers[0].Resources.Requests = tc.requests
			run.Spec.GPUs = tc.dra
			if got := plugintest.PodEnvs(t, Plugin{}, run)[0][EnvNprocPerNode]; got != tc.want {
				t.Errorf("%s = %q, want %q", EnvNprocPerNode, got, tc.want)
			}
		})
	}
}

func TestInvalidOptions(t *testing.T) {
	spec := func(workers int32, opts map[string]string) framework.RunSpec {
		return framework.SpecOf(makeRun("r", workers, opts, gpus("1")))
	}
	cases := map[string]struct {
		run  framework.RunSpec
		want string
	}{
		"unknown option":     {spec(2, map[string]string{"backend": "nccl"}), "frameworkOptions.backend is not a pytorch option (known: nprocPerNode, port, rdzvPort, rendezvous)"},
		"unknown rendezvous": {spec(2, map[string]string{OptionRendezvous: "etcd"}), `frameworkOptions.rendezvous "etcd" is not one of static, c10d`},
		"bad port":           {spec(2, map[string]string{OptionPort: "0"}), `frameworkOptions.port "0" is not a port number`},
		"rdzvPort without c10d": {spec(2, map[string]string{OptionRdzvPort: "29400"}),
			"frameworkOptions.rdzvPort applies only to rendezvous c10d"},
		"one port for both": {spec(2, map[string]string{OptionRendezvous: RendezvousC10d, OptionRdzvPort: "29500"}),
			"frameworkOptions.rdzvPort and frameworkOptions.port are both 29500"},
		"bad nproc":    {spec(2, map[string]string{OptionNprocPerNode: "eight"}), `frameworkOptions.nprocPerNode "eight" is neither a number`},
		"nproc zero":   {spec(2, map[string]string{OptionNprocPerNode: "0"}), `frameworkOptions.nprocPerNode "0"`},
		"nproc absurd": {spec(2, map[string]string{OptionNprocPerNode: "100000"}), `frameworkOptions.nprocPerNode "100000"`},
		"no workers":   {spec(0, nil), "spec.workers is 0"},
		// A controller of plugin API version 1 sends no worker: the GPUs are unknown.
		"an old controller": {framework.RunSpec{Name: "r", Namespace: "ns", Workers: 2}, "set frameworkOptions.nprocPerNode"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plugin{}.Rendezvous(context.Background(), tc.run)
			if !framework.IsInvalidOptions(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an OptionsError containing %q", err, tc.want)
			}
		})
	}
	// With the option, an old controller's run works.
	if _, err := (Plugin{}).Rendezvous(context.Background(), framework.RunSpec{Name: "r", Namespace: "ns", Workers: 2, Options: map[string]string{OptionNprocPerNode: "8"}}); err != nil {
		t.Errorf("old controller with nprocPerNode: %v", err)
	}
}

func TestInfo(t *testing.T) {
	info, err := Plugin{Version: "v9"}.Info(context.Background())
	want := framework.Info{Name: "pytorch", Version: "v9", APIVersion: framework.APIVersion, DefaultRestartScope: v1alpha1.RestartScopeGang,
		DefaultPorts: []framework.Port{{Name: "torch-master", Port: 29500}}}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Errorf("Info (-want +got):\n%s", diff)
	}
}

// TestHints: PyTorch's hints against real messages (each case names its upstream source),
// in the order the host tries them.
func TestHints(t *testing.T) {
	const (
		watchdog  = "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (the watchdog)"
		store     = "torch/csrc/distributed/c10d/Utils.hpp (recvBytes), TCPStore.cpp"
		allocator = "c10/cuda/CUDACachingAllocator.cpp (malloc)"
		gloo      = "gloo/transport/tcp/pair.cc (Pair::read)"
	)
	own := append([]framework.HintPattern{cudaOOM()}, peerHints()...)
	hinttest.Run(t, Name, Hints(), map[string]hinttest.Case{
		"CUDA out of memory": {
			Source: allocator,
			Message: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. " +
				"Process 2113 has 78.08 GiB memory in use. Of the allocated memory 76.34 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated. " +
				"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
			Want: v1alpha1.CauseAppExit,
		},
		"CUDA out of memory, older wording": {
			Source:  allocator + " (before 2.1)",
			Message: "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.61 GiB already allocated; 5.19 MiB free; 14.72 GiB reserved in total by PyTorch)",
			Want:    v1alpha1.CauseAppExit,
		},
		"the own OOM wins over its pod's other ranks losing it": {
			Source: allocator + "; " + store,
			Message: "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity of 79.15 GiB of which 312.00 MiB is free.\n" +
				"[rank1]:[W1121 10:00:01.000000000 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=64, addr=[llm-0]:35986, remote=[llm-0.llm.team-c.svc]:29500): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
			Want: v1alpha1.CauseAppExit,
		},
		"a device-side assert (a bad index)": {
			Source: "c10/cuda/CUDAException.h; CUDA runtime cudaGetErrorString (cudaErrorAssert)",
			Message: "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [64,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n" +
				"RuntimeError: CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
			Want: v1alpha1.CauseAppGPUError,
		},
		"watchdog timeout": {
			Source: watchdog,
			Message: "[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, " +
				"NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the watchdog's exception ends the process": {
			Source: watchdog + " (ncclCommWatchdog)",
			Message: "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: " +
				"[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5321, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.",
			Want: v1alpha1.CausePeerFailure,
		},
		"the store's host is gone": {
			Source: store,
			Message: "[rank1]:[W901 07:40:19.968570826 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=64, addr=[llm-1.llm.team-c.svc.cluster.local]:35986, " +
				"remote=[llm-0.llm.team-c.svc.cluster.local]:29500): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?\n" +
				"Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):",
			Want: v1alpha1.CausePeerFailure,
		},
		"rank 0 died while the others fetched the NCCL id": {
			Source: store + "; torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (broadcastUniqueNCCLID)",
			Message: "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', " +
				"but store->get('0') got error: failed to recv, got 0 bytes",
			Want: v1alpha1.CausePeerFailure,
		},
		"the store's host was killed": {
			Source: store + " (TCPClient::receiveValue)",
			Message: "[rank1]:[W1121 10:00:01.886560089 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=81, addr=[gpt-1.gpt.team-c.svc.cluster.local]:51546, " +
				"remote=[gpt-0.gpt.team-c.svc.cluster.local]:29500): Connection reset by peer",
			Want: v1alpha1.CausePeerFailure,
		},
		"a rank missed the monitored barrier": {
			Source:  "torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier)",
			Message: "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 30000 ms",
			Want:    v1alpha1.CausePeerFailure,
		},
		"a gloo peer crashed": {
			Source: gloo,
			Message: "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed by peer [10.4.2.7]:37264. This is typically caused by a remote worker crashing. " +
				"Check the logs of the remote worker before reporting an error. GLHF!",
			Want: v1alpha1.CausePeerFailure,
		},
		"a peer closed its NCCL connection": {
			Source: "nccl src/misc/socket.cc (socketProgress); torch/csrc/distributed/c10d/NCCLUtils.cpp",
			Message: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5\n" +
				"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nsocketProgress: Connection closed by remote peer gpt-1.gpt.team-c.svc.cluster.local<56154>",
			Want: v1alpha1.CausePeerFailure,
		},

		// Local errors and start-up problems: never a peer failure.
		"an application error": {
			Source:  "torch/nn/functional.py (cross_entropy)",
			Message: "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss = F.cross_entropy(out, y)\nValueError: Expected input batch_size (32) to match target batch_size (16).",
		},
		"pod 0 not reachable at start-up": {
			Source:  "torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp)",
			Message: "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to (gpt-0.gpt.team-c.svc, 29500).",
		},
		"the c10d rendezvous could not be reached": {
			Source: "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py (_create_tcp_store)",
			Message: "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.\n" +
				"torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (gpt-0.gpt.team-c.svc, 29400).",
		},
		"the watchdog's wrapper alone": {
			Source:  watchdog + " (the async error handling message)",
			Message: "[rank0]:[E1121 10:00:00.000000000 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
		},
		"NCCL could not set up a communicator": {
			Source: "torch/csrc/distributed/c10d/NCCLUtils.hpp; nccl ncclGetErrorString",
			Message: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.20.5\n" +
				"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nnet.cc:154 NCCL WARN NET/Socket : No usable listening interface found",
		},
		"an uncorrectable ECC error is the node agent's to prove": {
			Source:  "CUDA runtime cudaGetErrorString (cudaErrorECCUncorrectable)",
			Message: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
		},
	}, own)
}

// The hints survive the host's own checks, over gRPC.
func TestHintsThroughTheHost(t *testing.T) {
	h := framework.NewTestHost(t, framework.HostOptions{}, map[string]framework.Plugin{Name: Plugin{}})
	hints, err := h.Hints(context.Background(), makeRun("r", 1, nil, nil))
	if err != nil || len(hints) != len(Hints()) {
		t.Fatalf("Hints through the host: %d, %v; want %d", len(hints), err, len(Hints()))
	}
}
