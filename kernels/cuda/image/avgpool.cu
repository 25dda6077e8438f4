// Launchers of the global average pooling kernels (avgpool.hpp).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/image/avgpool.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/avgpool.cuh"
#include "kernels/cuda/entry.cuh"
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

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

namespace {
// Channels-last maps are not built here (supports_channels_last() is false): refused.
// Channels-last maps are not built here (supports_channels_last() is false): refused.
void require_planes(std::int64_t channels, const char* op) {
  if (channels != 1)
    throw std::invalid_argument(std::string(op) + " (cuda): channels-last maps (channels " + std::to_string(channels) +
                                " > 1) are not supported by the cuda backend");
}
}  // namespace

void CudaBackend::global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                                         std::int64_t channels, kernels::Queue& q) {
  const char* op = "global_avgpool";
  require_planes(channels, op);
  CudaQueue& cq = enter(q, Op::global_avgpool, x.dtype(), op, {{x, rows * spatial, "x"}, {y, rows, "y"}});
  cuda::global_avgpool_forward(f32(x), f32(y), rows, spatial, cq.context());
}

void CudaBackend::global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                                          std::int64_t channels, kernels::Queue& q) {
  const char* op = "global_avgpool backward";
  require_planes(channels, op);
  CudaQueue& cq = enter(q, Op::global_avgpool, dy.dtype(), op, {{dy, rows, "dy"}, {dx, rows * spatial, "dx"}});
  cuda::global_avgpool_backward(f32(dy), f32(dx), rows, spatial, cq.context());
}

}  // namespace codistill::kernels::cuda
