// Launchers of the max pooling kernels (conv2d.hpp), float32 NCHW; the kernels and their
// tie and NaN rule are in device/pool.cuh (the CPU twin's rule), the shape is
// launch_shapes.hpp elementwise.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/pool.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/image/conv2d.hpp"
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

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& /*argmax*/,
                                    const Pool2dShape& s, kernels::Queue& q) {
  // The argmax is the CPU's: the CUDA backward finds the maxima again from x (pool.cu).
  const char* op = "maxpool2d";
  CudaQueue& cq = enter(q, Op::maxpool2d, x.dtype(), op);
  s.validate();
  ops::expect(cq.device(), op,
              {{x, s.batch * s.channels * s.height * s.width, "x"},
               {y, s.batch * s.channels * s.out_height() * s.out_width(), "y"}});
  cuda::maxpool2d_forward(f32(x), f32(y), s, cq.context());
}

void CudaBackend::maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& /*argmax*/,
                                     const Tensor& dy, Tensor& dx, const Pool2dShape& s,
                                     kernels::Queue& q) {
  const char* op = "maxpool2d backward";
  CudaQueue& cq = enter(q, Op::maxpool2d, dy.dtype(), op);
  s.validate();
  const std::int64_t nx = s.batch * s.channels * s.height * s.width;
  const std::int64_t ny = s.batch * s.channels * s.out_height() * s.out_width();
  ops::expect(cq.device(), op, {{x, nx, "x"}, {y, ny, "y"}, {dy, ny, "dy"}, {dx, nx, "dx"}});
  cuda::maxpool2d_backward(f32(x), f32(y), f32(dy), f32(dx), s, cq.context());
}

}  // namespace codistill::kernels::cuda
