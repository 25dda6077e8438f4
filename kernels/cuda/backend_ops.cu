// The CUDA backend's op entry points (kernels/backend.hpp), dense and elementwise ops (linear,
// activations, convolution, pooling, softmax, multiply, add with or without a fused relu): each
// checks what keeps a bad call from handing a kernel memory it cannot address (the queue is
// this backend's, every tensor is on the queue's device, in the dtype and with the element
// count the kernel reads: backend_ops_util.cuh), then queues the kernels of kernels/cuda/*.hpp
// on the queue's stream with the queue's context (stream, TF32, resources). Shapes beyond
// element counts are the layers' to validate. Gradients accumulate (accumulate = true):
// zeroing is the caller's Queue::zero.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/backend_ops_util.cuh"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/linear.hpp"

namespace codistill::kernels::cuda {

using ops::expect;
using ops::f32;

// ---- linear --------------------------------------------------------------------------------

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 Activation act, Tensor* pre, kernels::Queue& q) {
  const char* op = "linear";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(),
                  op);
  const Device dev = cq.device();
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  expect(x, dev, DType::f32, M * K, op, "x");
  expect(w, dev, DType::f32, N * K, op, "w");
  if (b) expect(*b, dev, DType::f32, N, op, "b");
  expect(y, dev, DType::f32, M * N, op, "y");
  // Only gelu's backward needs the pre-activation.
  Tensor* keep = act == Activation::gelu ? pre : nullptr;
  if (keep) expect(*keep, dev, DType::f32, M * N, op, "pre");
  const Context ctx = cq.context();
  if (act == Activation::none) {
    cuda::linear_forward(f32(x), f32(w), f32(b), f32(y), M, N, K, ctx);
    return;
  }
  // The GEMM without bias, then bias + activation in one pass over y.
  cuda::linear_forward(f32(x), f32(w), nullptr, f32(y), M, N, K, ctx);
  bias_activation_forward(f32(y), f32(b), f32(keep), M, N, act, ctx);
}

void CudaBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                  Tensor& dw, Tensor* db, Activation act, const Tensor* saved,
                                  Tensor* dpre, bool accumulate, kernels::Queue& q) {
  const char* op = "linear backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(),
                  op);
  const Device dev = cq.device();
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  expect(x, dev, DType::f32, M * K, op, "x");
  expect(w, dev, DType::f32, N * K, op, "w");
  expect(dy, dev, DType::f32, M * N, op, "dy");
  if (dx) expect(*dx, dev, DType::f32, M * K, op, "dx");
  expect(dw, dev, DType::f32, N * K, op, "dw");
  if (db) expect(*db, dev, DType::f32, N, op, "db");
  const Context ctx = cq.context();
  if (act == Activation::none) {
    cuda::linear_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), M, N, K, accumulate, ctx);
    return;
  }
  if (!saved || !dpre)
    throw std::invalid_argument("linear backward (cuda): a fused activation needs saved and dpre");
  expect(*saved, dev, DType::f32, M * N, op, "saved");
  expect(*dpre, dev, DType::f32, M * N, op, "dpre");
  // dpre = dy * act'(saved) and db += colsum(dpre) in one pass, then the GEMMs on dpre.
  bias_activation_backward(f32(dy), f32(*saved), f32(dpre), f32(db), M, N, act, accumulate, ctx);
  cuda::linear_backward(f32(x), f32(w), f32(*dpre), f32(dx), f32(dw), nullptr, M, N, K, accumulate, ctx);
}

// ---- activations -----------------------------------------------------------------------------

void CudaBackend::activation_forward(const Tensor& x, Tensor& y, Activation act,
                                     kernels::Queue& q) {
  const char* op = "activation";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::activation, x.dtype(), op);
  expect(x, cq.device(), DType::f32, x.numel(), op, "x");
  expect(y, cq.device(), DType::f32, x.numel(), op, "y");
  cuda::activation_forward(f32(x), f32(y), x.numel(), act, cq.context());
}

void CudaBackend::activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx,
                                      Activation act, kernels::Queue& q) {
  const char* op = "activation backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::activation, dy.dtype(), op);
  const std::int64_t n = dy.numel();
  expect(dy, cq.device(), DType::f32, n, op, "dy");
  expect(dx, cq.device(), DType::f32, n, op, "dx");
  // none: dx = dy, nothing saved.
  const bool uses_saved = act != Activation::none;
  if (uses_saved) expect(saved, cq.device(), DType::f32, n, op, "saved");
  cuda::activation_backward(uses_saved ? f32(saved) : nullptr, f32(dy), f32(dx), n, act,
                            cq.context());
}

// ---- convolution and pooling -----------------------------------------------------------------

namespace {
// Channels-last maps are not built here (supports_channels_last() is false): refused.
void require_nchw(const Conv2dShape& s, const char* op) {
  if (s.channels_last)
    throw std::invalid_argument(std::string(op) + " (cuda): channels-last maps are not supported by the cuda backend");
}
}  // namespace

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 const Conv2dShape& s, kernels::Queue& q) {
  const char* op = "conv2d";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  const Device dev = cq.device();
  expect(x, dev, DType::f32, s.batch * s.in_channels * s.height * s.width, op, "x");
  expect(w, dev, DType::f32, s.out_channels * s.in_channels * s.kernel_h * s.kernel_w, op, "w");
  if (b) expect(*b, dev, DType::f32, s.out_channels, op, "b");
  expect(y, dev, DType::f32, s.batch * s.out_channels * s.out_height() * s.out_width(), op, "y");
  cuda::conv2d_forward(f32(x), f32(w), f32(b), f32(y), s, cq.context());
}

void CudaBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                  Tensor& dw, Tensor* db, const Conv2dShape& s,
                                  kernels::Queue& q) {
  const char* op = "conv2d backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  const Device dev = cq.device();
  const std::int64_t nx = s.batch * s.in_channels * s.height * s.width;
  const std::int64_t nw = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
  expect(x, dev, DType::f32, nx, op, "x");
  expect(w, dev, DType::f32, nw, op, "w");
  expect(dy, dev, DType::f32, s.batch * s.out_channels * s.out_height() * s.out_width(), op, "dy");
  if (dx) expect(*dx, dev, DType::f32, nx, op, "dx");
  expect(dw, dev, DType::f32, nw, op, "dw");
  if (db) expect(*db, dev, DType::f32, s.out_channels, op, "db");
  cuda::conv2d_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), s,
                        /*accumulate=*/true, cq.context());
}

void CudaBackend::maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& /*argmax*/,
                                    const Pool2dShape& s, kernels::Queue& q) {
  // The argmax is the CPU's: the CUDA backward finds the maxima again from x (pool.cu).
  const char* op = "maxpool2d";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::maxpool2d, x.dtype(), op);
  s.validate();
  expect(x, cq.device(), DType::f32, s.batch * s.channels * s.height * s.width, op, "x");
  expect(y, cq.device(), DType::f32, s.batch * s.channels * s.out_height() * s.out_width(), op,
         "y");
  cuda::maxpool2d_forward(f32(x), f32(y), s, cq.context());
}

void CudaBackend::maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& /*argmax*/,
                                     const Tensor& dy, Tensor& dx, const Pool2dShape& s,
                                     kernels::Queue& q) {
  const char* op = "maxpool2d backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::maxpool2d, dy.dtype(), op);
  s.validate();
  const std::int64_t nx = s.batch * s.channels * s.height * s.width;
  const std::int64_t ny = s.batch * s.channels * s.out_height() * s.out_width();
  expect(x, cq.device(), DType::f32, nx, op, "x");
  expect(y, cq.device(), DType::f32, ny, op, "y");
  expect(dy, cq.device(), DType::f32, ny, op, "dy");
  expect(dx, cq.device(), DType::f32, nx, op, "dx");
  cuda::maxpool2d_backward(f32(x), f32(y), f32(dy), f32(dx), s, cq.context());
}

// ---- batch normalization ---------------------------------------------------------------------

void CudaBackend::softmax_forward(const Tensor& x, Tensor& /*y*/, kernels::Queue& /*q*/) {
  require_support(*this, Op::softmax, x.dtype(), "softmax");  // throws: not supported
  throw std::logic_error("softmax (cuda): supports() claims a kernel that does not exist");
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& /*dy*/, Tensor& /*dx*/,
                                   kernels::Queue& /*q*/) {
  require_support(*this, Op::softmax, y.dtype(), "softmax backward");  // throws
  throw std::logic_error("softmax backward (cuda): supports() claims a kernel that does not exist");
}

// ---- elementwise ---------------------------------------------------------------------------

void CudaBackend::multiply(const Tensor& x, const Tensor& m, Tensor& y, kernels::Queue& q) {
  const char* op = "multiply";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::multiply, x.dtype(), op);
  const std::int64_t n = x.numel();
  expect(x, cq.device(), DType::f32, n, op, "x");
  expect(m, cq.device(), DType::f32, n, op, "m");
  expect(y, cq.device(), DType::f32, n, op, "y");
  cuda::multiply(f32(x), f32(m), f32(y), n, cq.context());
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y, kernels::Queue& q) {
  const char* op = "add";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::add, a.dtype(), op);
  const std::int64_t n = a.numel();
  expect(a, cq.device(), DType::f32, n, op, "a");
  expect(b, cq.device(), DType::f32, n, op, "b");
  expect(y, cq.device(), DType::f32, n, op, "y");
  cuda::add(f32(a), f32(b), f32(y), n, cq.context());
}

// relu(a + b) in one pass (Op::add_activation); act must be relu; y may alias a or b.
void CudaBackend::add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, kernels::Queue& q) {
  const char* op = "add+activation";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::add_activation, a.dtype(), op);
  ops::expect_relu(act, op);
  const std::int64_t n = a.numel();
  expect(a, cq.device(), DType::f32, n, op, "a");
  expect(b, cq.device(), DType::f32, n, op, "b");
  expect(y, cq.device(), DType::f32, n, op, "y");
  cuda::add_relu(f32(a), f32(b), f32(y), n, cq.context());
}

// ---- the fused loss --------------------------------------------------------------------------

}  // namespace codistill::kernels::cuda
