// Launchers of the layer normalization kernels (layernorm.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/layernorm.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/sequence/layernorm.hpp"

namespace codistill::kernels::cuda {

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* save_mean,
                       float* save_invstd, const LayerNormShape& s, const Context& ctx) {
  s.validate();
  if (s.rows == 0) return;
  detail::use_device(ctx);
  const auto shape = shapes::layernorm_rows(s.rows, s.features);
  device::layernorm_forward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      x, gamma, beta, y, save_mean, save_invstd, s.features, static_cast<float>(s.eps));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(const float* x, const float* gamma, const float* save_mean, const float* save_invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, const LayerNormShape& s,
                        const Context& ctx) {
  s.validate();
  if (s.rows == 0) return;
  detail::use_device(ctx);
  if (dx) {
    const auto rows = shapes::layernorm_rows(s.rows, s.features);
    device::layernorm_backward_dx_kernel<<<rows.grid.x, rows.block.x, 0, detail::stream_of(ctx)>>>(
        x, gamma, save_mean, save_invstd, dy, dx, s.features);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
  const auto cols = shapes::elementwise(s.features);
  device::layernorm_backward_param_kernel<<<cols.grid.x, cols.block.x, 0, detail::stream_of(ctx)>>>(
      x, save_mean, save_invstd, dy, dgamma, dbeta, s.rows, s.features);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                    Tensor& save_mean, Tensor& save_invstd, const LayerNormShape& s,
                                    kernels::Queue& q) {
  const char* op = "layernorm";
  CudaQueue& cq = enter(q, Op::layernorm, x.dtype(), op);
  s.validate();
  const std::int64_t n = s.rows * s.features;
  ops::expect(cq.device(), op,
              {{x, n, "x"}, {y, n, "y"}, {gamma, s.features, "gamma"}, {beta, s.features, "beta"},
               {save_mean, s.rows, "save_mean"}, {save_invstd, s.rows, "save_invstd"}});
  cuda::layernorm_forward(f32(x), f32(gamma), f32(beta), f32(y), f32(save_mean), f32(save_invstd), s,
                          cq.context());
}

void CudaBackend::layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, const LayerNormShape& s, kernels::Queue& q) {
  const char* op = "layernorm backward";
  CudaQueue& cq = enter(q, Op::layernorm, dy.dtype(), op);
  s.validate();
  const std::int64_t n = s.rows * s.features;
  ops::expect(cq.device(), op,
              {{x, n, "x"}, {dy, n, "dy"}, {dx, n, "dx"}, {gamma, s.features, "gamma"},
               {save_mean, s.rows, "save_mean"}, {save_invstd, s.rows, "save_invstd"},
               {dgamma, s.features, "dgamma"}, {dbeta, s.features, "dbeta"}});
  cuda::layernorm_backward(f32(x), f32(gamma), f32(save_mean), f32(save_invstd), f32(dy), f32(dx), f32(dgamma),
                           f32(dbeta), s, cq.context());
}

}  // namespace codistill::kernels::cuda
