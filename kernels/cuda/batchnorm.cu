// Launchers of the batch normalization kernels (batchnorm.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/batchnorm.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {
namespace {

device::BatchNormDims dims_of(const BatchNormShape& s, bool training) {
  return {s.batch, s.channels, s.spatial, static_cast<float>(s.eps), static_cast<float>(s.momentum), training};
}

}  // namespace

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, float* y, float* save_mean, float* save_invstd, bool training,
                       const BatchNormShape& s, const Context& ctx) {
  s.validate(training);
  detail::use_device(ctx);
  const auto shape = shapes::batchnorm(s.channels, s.per_channel());
  device::batchnorm_forward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, dims_of(s, training));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void batchnorm_backward(const float* x, const float* gamma, const float* save_mean, const float* save_invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, bool training,
                        const BatchNormShape& s, const Context& ctx) {
  s.validate(training);
  detail::use_device(ctx);
  const auto shape = shapes::batchnorm(s.channels, s.per_channel());
  device::batchnorm_backward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      x, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, dims_of(s, training));
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
