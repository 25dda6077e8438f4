// The CUDA backend's op entry points (kernels/backend.hpp), normalization and global pooling
// (batch norm with or without a fused relu, layer norm, global average pooling): each checks what keeps a bad call from
// handing a kernel memory it cannot address (the queue is this backend's, every tensor is on the
// queue's device, in the dtype and with the element count the kernel reads:
// backend_ops_util.cuh), then queues the kernels of kernels/cuda/*.hpp on the queue's stream
// with the queue's context (stream, TF32, resources). Shapes beyond element counts are the
// layers' to validate. Gradients accumulate (accumulate = true): zeroing is the caller's
// Queue::zero.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/backend_ops_util.cuh"
#include "kernels/cuda/avgpool.hpp"
#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/layernorm.hpp"

namespace codistill::kernels::cuda {

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

// ---- global average pooling --------------------------------------------------------------------

namespace {
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

// ---- layer normalization -----------------------------------------------------------------------

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

// ---- embedding and causal attention ----------------------------------------------------------

}  // namespace codistill::kernels::cuda
