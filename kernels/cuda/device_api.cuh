#pragma once
// The one switch between the two compilers of the kernel sources in kernels/cuda/device/:
// nvcc gets the CUDA headers; the host compiler (the tests' SIMT executor, which runs the
// same kernels on the CPU) gets tests/support/simt/cuda_shim.hpp, which provides the CUDA
// spellings the kernels use. Nothing else in a kernel header may depend on the compiler.
//
// The kernels live in an inline namespace named after the compiler, so that a test binary
// that links the nvcc-built library and compiles the same kernels for the executor never
// has two different definitions of one symbol (nvcc's host launch stubs would otherwise
// collide with the executor's instantiations).
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define CODISTILL_DEVICE_ABI nvcc
#else
#include "simt/cuda_shim.hpp"
#define CODISTILL_DEVICE_ABI simt_host
#endif
