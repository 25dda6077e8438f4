// Launchers of the layer normalization kernels (layernorm.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/layernorm.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/layernorm.hpp"

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

}  // namespace codistill::kernels::cuda
