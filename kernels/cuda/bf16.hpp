#pragma once
// float32 -> bf16 rounding on CUDA for mixed precision (kernels/ops.hpp, Compute::bf16):
// y[i] = the bf16 bits of x[i], by the CPU's rule (kernels/cpu/bf16.hpp); the kernel is
// device/bf16.cuh, its launch shape shapes::elementwise. linear.cu rounds each GEMM operand
// with it before a bf16 cublasGemmEx. Queued on ctx's stream; n >= 0.
#include <cstdint>

#include "kernels/cuda/context.hpp"

namespace codistill::kernels::cuda {

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n, const Context& ctx);

}  // namespace codistill::kernels::cuda
