#pragma once
// float32 -> bfloat16 rounding of GEMM operands for mixed precision (kernels/ops.hpp,
// Compute::bf16), a grid-stride loop launched by kernels/cuda/bf16.cu with
// shapes::elementwise and run by the tests under the SIMT executor against the CPU's rule
// (kernels/cpu/bf16.hpp): round to nearest, ties to even, on the bit pattern (subnormals
// kept: cuda_bf16's conversion is not used, so the rule is the CPU's whatever the device's
// flush-to-zero mode), NaN kept quiet with its sign. The output is the raw bf16 bits, which
// cuBLAS reads as CUDA_R_16BF. bf16_widen is the way back, exact: the bits as the upper half
// of a float32 (a bf16 table's rows, device/embedding.cuh).
#include <cstdint>

#include "kernels/cuda/device_api.cuh"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

__device__ __forceinline__ std::uint16_t bf16_round_bits(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float bf16_widen(std::uint16_t bits) {
  return __uint_as_float(static_cast<unsigned>(bits) << 16);
}

template <class I>
__global__ void round_to_bf16_kernel(const float* __restrict__ x, std::uint16_t* __restrict__ y, I n) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += stride) y[i] = bf16_round_bits(x[i]);
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
