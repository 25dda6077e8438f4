// Launchers of the global average pooling kernels (avgpool.hpp).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/avgpool.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/avgpool.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {

void global_avgpool_forward(const float* x, float* y, std::int64_t rows, std::int64_t spatial, const Context& ctx) {
  if (rows < 0 || spatial < 1) throw std::invalid_argument("global_avgpool (cuda): bad sizes");
  if (rows == 0) return;
  detail::use_device(ctx);
  const auto shape = shapes::elementwise(rows);
  device::global_avgpool_forward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(x, y, rows,
                                                                                                    spatial);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void global_avgpool_backward(const float* dy, float* dx, std::int64_t rows, std::int64_t spatial,
                             const Context& ctx) {
  if (rows < 0 || spatial < 1) throw std::invalid_argument("global_avgpool backward (cuda): bad sizes");
  if (rows == 0) return;
  detail::use_device(ctx);
  const auto shape = shapes::elementwise(rows * spatial);
  device::global_avgpool_backward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      dy, dx, rows, spatial);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
