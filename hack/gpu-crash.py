#!/usr/bin/env python3
"""Crash a kernel on GPU 0 by writing to an invalid address.

The driver raises XID 31 (a GPU memory page fault), which faultline must classify as the
program's fault, not the infrastructure's: FAULTLINE_NVML_PROVOKE for the real-GPU tests
(README: "On a real GPU"). The GPU stays healthy; only this process's CUDA context dies.
Needs CuPy (any cupy-cuda* wheel that matches the driver).
"""
import cupy

kernel = cupy.RawKernel(r'''extern "C" __global__ void crash() { *(volatile int *)0x10 = 1; }''', "crash")
kernel((1,), (1,), ())
cupy.cuda.runtime.deviceSynchronize()  # raises CUDA_ERROR_ILLEGAL_ADDRESS: exit status 1
