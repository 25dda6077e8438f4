// Launcher of the bf16 rounding kernel (bf16.hpp; kernel in device/bf16.cuh).
#include <cuda_runtime.h>

#include "kernels/cuda/bf16.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/bf16.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {

void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n, const Context& ctx) {
  detail::check_nonnegative("round_to_bf16", n);
  if (n == 0) return;
  detail::use_device(ctx);
  const shapes::Launch l = shapes::elementwise(n);
  const dim3 grid(l.grid.x, l.grid.y, l.grid.z), block(l.block.x, l.block.y, l.block.z);
  if (shapes::small_index(n))
    device::round_to_bf16_kernel<std::uint32_t>
        <<<grid, block, l.smem, detail::stream_of(ctx)>>>(x, y, static_cast<std::uint32_t>(n));
  else
    device::round_to_bf16_kernel<std::uint64_t>
        <<<grid, block, l.smem, detail::stream_of(ctx)>>>(x, y, static_cast<std::uint64_t>(n));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
