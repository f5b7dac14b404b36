package gpuhints

import (
	"testing"

	"github.com/faultline-dev/faultline/api/v1alpha1"
	"github.com/faultline-dev/faultline/pkg/framework/hinttest"
)

const (
	cudaStrings = "CUDA runtime cudaGetErrorString / driver cuGetErrorName"
	ncclSocket  = "nccl src/misc/socket.cc (socketProgress)"
	torchNCCL   = "pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (the NCCL error with \"Last error:\" from ncclGetLastError)"
	xlaNCCL     = "xla/service/gpu nccl ToStatus (\"NCCL operation %s failed: %s. Last NCCL warning(error) log entry\")"
)

func TestHints(t *testing.T) {
	hints := append(CUDA(), NCCLPeerLoss()...)
	hinttest.Run(t, "gpu", hints, map[string]hinttest.Case{
		"illegal memory access (PyTorch)": {
			Source: cudaStrings + "; pytorch c10/cuda/CUDAException.h (C10_CUDA_CHECK)",
			Message: "RuntimeError: CUDA error: an illegal memory access was encountered\n" +
				"CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n" +
				"For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
			Want: v1alpha1.CauseAppGPUError,
		},
		"illegal memory access (XLA)": {
			Source:  cudaStrings + "; xla stream_executor cuda_driver",
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
			Want:    v1alpha1.CauseAppGPUError,
		},
		"device-side assert": {
			Source: cudaStrings + "; pytorch c10/cuda/CUDAException.h",
			Message: "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [12,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n" +
				"RuntimeError: CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
			Want: v1alpha1.CauseAppGPUError,
		},
		"a peer closed its NCCL connection (PyTorch)": {
			Source: ncclSocket + "; " + torchNCCL,
			Message: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.20.5\n" +
				"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n" +
				"Last error:\nsocketProgress: Connection closed by remote peer llm-1.llm.team-a.svc.cluster.local<56154>",
			Want: v1alpha1.CausePeerFailure,
		},
		"a peer closed its NCCL connection (XLA)": {
			Source: ncclSocket + "; " + xlaNCCL,
			Message: "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/runtime/nccl_api.cc:518: NCCL operation ncclGroupEnd() failed: " +
				"remote process exited or there was a network error. Last NCCL warning(error) log entry (may be unrelated) 'socketProgress: Connection closed by remote peer 10.4.2.7<53422>'.",
			Want: v1alpha1.CausePeerFailure,
		},
		"older NCCL: a peer reset the connection": {
			Source:  "nccl src/misc/socket.cc (socketProgressOpt, before resets were reported as closed)",
			Message: "llm-0:123:456 [0] misc/socket.cc:538 NCCL WARN socketProgressOpt: Call to recv from 10.4.2.7<44122> failed : Connection reset by peer",
			Want:    v1alpha1.CausePeerFailure,
		},

		// Not the program's fault, and not provable from its output: left to the node agent.
		"uncorrectable ECC error": {
			Source:  cudaStrings + " (cudaErrorECCUncorrectable)",
			Message: "RuntimeError: CUDA error: uncorrectable ECC error encountered",
		},
		// Local or configuration errors: never a peer failure.
		"ncclRemoteError while setting up a communicator (a wrong NCCL_SOCKET_IFNAME)": {
			Source: torchNCCL,
			Message: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.20.5\n" +
				"ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n" +
				"Last error:\nnet.cc:154 NCCL WARN NET/Socket : No usable listening interface found",
		},
		"NCCL shared memory too small": {
			Source: torchNCCL + "; nccl src/misc/shmutils.cc",
			Message: "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n" +
				"ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n" +
				"Last error:\nError while creating shared memory segment /dev/shm/nccl-vzIpS6 (size 9637888)",
		},
		"a dataset server hung up": {
			Source:  "python urllib3 (ConnectionResetError, errno 104)",
			Message: "urllib3.exceptions.ProtocolError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))",
		},
	}, hints)
}
