// Launchers of the batch normalization kernels (batchnorm.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/batchnorm.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/image/batchnorm.hpp"
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

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

namespace {
// What batch norm and its fused-relu twin share once the queue and the op are checked: the
// element counts, then the launch. relu: the forward writes relu(bn(x)).
void batchnorm_forward_on(CudaQueue& cq, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          Tensor& running_mean, Tensor& running_var, Tensor& y, Tensor& save_mean,
                          Tensor& save_invstd, bool training, bool relu, const BatchNormShape& s, const char* op) {
  s.validate(training);
  const std::int64_t n = s.batch * s.channels * s.spatial, C = s.channels;
  ops::expect(cq.device(), op,
              {{x, n, "x"}, {y, n, "y"}, {gamma, C, "gamma"}, {beta, C, "beta"}, {running_mean, C, "running_mean"},
               {running_var, C, "running_var"}, {save_mean, C, "save_mean"}, {save_invstd, C, "save_invstd"}});
  cuda::batchnorm_forward(f32(x), f32(gamma), f32(beta), f32(running_mean), f32(running_var), f32(y),
                          f32(save_mean), f32(save_invstd), training, s, cq.context(), relu);
}

// relu_y: null, or the fused forward's output (dy masked with y > 0).
void batchnorm_backward_on(CudaQueue& cq, const Tensor& x, const Tensor* relu_y, const Tensor& gamma,
                           const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dy, Tensor* dx,
                           Tensor& dgamma, Tensor& dbeta, bool training, const BatchNormShape& s, const char* op) {
  s.validate(training);
  const std::int64_t n = s.batch * s.channels * s.spatial, C = s.channels;
  ops::expect(cq.device(), op,
              {{x, n, "x"}, {relu_y, n, "y"}, {dy, n, "dy"}, {dx, n, "dx"}, {gamma, C, "gamma"},
               {save_mean, C, "save_mean"}, {save_invstd, C, "save_invstd"}, {dgamma, C, "dgamma"},
               {dbeta, C, "dbeta"}});
  cuda::batchnorm_backward(f32(x), f32(gamma), f32(save_mean), f32(save_invstd), f32(dy), f32(dx), f32(dgamma),
                           f32(dbeta), training, s, cq.context(), f32(relu_y));
}
}  // namespace

void CudaBackend::batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                    Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                    bool training, const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm";
  CudaQueue& cq = enter(q, Op::batchnorm, x.dtype(), op);
  batchnorm_forward_on(cq, x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, training, false, s,
                       op);
}

void CudaBackend::batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, bool training, const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm backward";
  CudaQueue& cq = enter(q, Op::batchnorm, dy.dtype(), op);
  batchnorm_backward_on(cq, x, nullptr, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, training, s, op);
}

// The fused relu (Op::batchnorm_activation): the same passes with the relu flag, so the same
// cost as batchnorm_forward / batchnorm_backward; act must be relu.
void CudaBackend::batchnorm_activation_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                               Tensor& running_mean, Tensor& running_var, Tensor& y,
                                               Tensor& save_mean, Tensor& save_invstd, bool training, Activation act,
                                               const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm+activation";
  CudaQueue& cq = enter(q, Op::batchnorm_activation, x.dtype(), op);
  ops::expect_relu(act, op);
  batchnorm_forward_on(cq, x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd, training, true, s,
                       op);
}

void CudaBackend::batchnorm_activation_backward(const Tensor& x, const Tensor& y, const Tensor& gamma,
                                                const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dy,
                                                Tensor* dx, Tensor& dgamma, Tensor& dbeta, bool training,
                                                Activation act, const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm+activation backward";
  CudaQueue& cq = enter(q, Op::batchnorm_activation, dy.dtype(), op);
  ops::expect_relu(act, op);
  batchnorm_backward_on(cq, x, &y, gamma, save_mean, save_invstd, dy, dx, dgamma, dbeta, training, s, op);
}

}  // namespace codistill::kernels::cuda
