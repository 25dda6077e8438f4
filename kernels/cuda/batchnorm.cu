// Launchers of the batch normalization kernels (batchnorm.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/batchnorm.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {
namespace {

device::BatchNormDims dims_of(const BatchNormShape& s, bool training, const shapes::BatchNormLaunch& b,
                              bool relu = false) {
  return {s.batch,  s.channels, s.spatial,   static_cast<float>(s.eps), static_cast<float>(s.momentum),
          training, b.chunks,   b.per_chunk, relu};
}

dim3 grid_of(const shapes::Launch& l) { return dim3(l.grid.x, l.grid.y, l.grid.z); }

}  // namespace

// Training: three passes over x (sums, squared deviations, y), the channel statistics
// gathered through per-chunk partials in the queue's scratch memory; eval: one pass. A fused
// relu is the last pass's flag: no extra pass.
void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, float* y, float* save_mean, float* save_invstd, bool training,
                       const BatchNormShape& s, const Context& ctx, bool relu) {
  s.validate(training);
  detail::use_device(ctx);
  const auto b = shapes::batchnorm(s.channels, s.per_channel());
  const auto d = dims_of(s, training, b, relu);
  cudaStream_t stream = detail::stream_of(ctx);
  double* partial = nullptr;
  if (training) {
    partial = static_cast<double*>(detail::stream_workspace(ctx, b.partial_bytes));
    double* partial_sq = partial + s.channels * b.chunks;
    device::batchnorm_sum_kernel<<<grid_of(b.pass), b.pass.block.x, 0, stream>>>(x, partial, d);
    CODISTILL_CUDA_LAUNCH_CHECK();
    device::batchnorm_sqdev_kernel<<<grid_of(b.pass), b.pass.block.x, 0, stream>>>(x, partial, partial_sq, d);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
  device::batchnorm_normalize_kernel<<<grid_of(b.pass), b.pass.block.x, 0, stream>>>(
      x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, partial,
      partial ? partial + s.channels * b.chunks : nullptr, d);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void batchnorm_backward(const float* x, const float* gamma, const float* save_mean, const float* save_invstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, bool training,
                        const BatchNormShape& s, const Context& ctx, const float* relu_y) {
  s.validate(training);
  detail::use_device(ctx);
  const auto b = shapes::batchnorm(s.channels, s.per_channel());
  const auto d = dims_of(s, training, b);
  cudaStream_t stream = detail::stream_of(ctx);
  auto* partial = static_cast<double*>(detail::stream_workspace(ctx, b.partial_bytes));
  device::batchnorm_backward_sums_kernel<<<grid_of(b.pass), b.pass.block.x, 0, stream>>>(x, save_mean, save_invstd,
                                                                                          dy, relu_y, partial, d);
  CODISTILL_CUDA_LAUNCH_CHECK();
  device::batchnorm_backward_dx_kernel<<<grid_of(b.pass), b.pass.block.x, 0, stream>>>(
      x, gamma, save_mean, save_invstd, dy, relu_y, dx, dgamma, dbeta, partial, d);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace codistill::kernels::cuda
