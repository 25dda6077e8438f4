// Launchers of the max pooling kernels (conv2d.hpp), float32 NCHW; the kernels and their
// tie and NaN rule are in device/pool.cuh (the CPU twin's rule), the shape is
// launch_shapes.hpp elementwise.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/device/pool.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {
namespace {

using device::PoolDims;

PoolDims dims_of(const Pool2dShape& s) {
  return {s.height, s.width, s.kernel, s.stride, s.out_height(), s.out_width()};
}

}  // namespace

void maxpool2d_forward(const float* x, float* y, const Pool2dShape& s, const Context& ctx) {
  s.validate();
  const std::int64_t total = s.batch * s.channels * s.out_height() * s.out_width();
  if (total == 0) return;
  detail::use_device(ctx);
  const auto shape = shapes::elementwise(total);
  device::maxpool_forward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      x, y, total, dims_of(s));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void maxpool2d_backward(const float* x, const float* /*y*/, const float* dy,
                        float* dx, const Pool2dShape& s, const Context& ctx) {
  s.validate();
  const std::int64_t total = s.batch * s.channels * s.height * s.width;
  if (total == 0) return;
  detail::use_device(ctx);
  const auto shape = shapes::elementwise(total);
  device::maxpool_backward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      x, dy, dx, total, dims_of(s));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
