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

using ops::f32;

// ---- linear --------------------------------------------------------------------------------

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 Activation act, Tensor* pre, kernels::Queue& q) {
  const char* op = "linear";
  CudaQueue& cq = enter(q, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), op);
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  // Only gelu's backward needs the pre-activation.
  Tensor* keep = act == Activation::gelu ? pre : nullptr;
  ops::expect(cq.device(), op, {{x, M * K, "x"}, {w, N * K, "w"}, {b, N, "b"}, {y, M * N, "y"}, {keep, M * N, "pre"}});
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
  CudaQueue& cq = enter(q, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), op);
  const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
  ops::expect(cq.device(), op,
              {{x, M * K, "x"}, {w, N * K, "w"}, {dy, M * N, "dy"}, {dx, M * K, "dx"}, {dw, N * K, "dw"},
               {db, N, "db"}});
  const Context ctx = cq.context();
  if (act == Activation::none) {
    cuda::linear_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), M, N, K, accumulate, ctx);
    return;
  }
  if (!saved || !dpre)
    throw std::invalid_argument("linear backward (cuda): a fused activation needs saved and dpre");
  ops::expect(cq.device(), op, {{saved, M * N, "saved"}, {dpre, M * N, "dpre"}});
  // dpre = dy * act'(saved) and db += colsum(dpre) in one pass, then the GEMMs on dpre.
  bias_activation_backward(f32(dy), f32(*saved), f32(dpre), f32(db), M, N, act, accumulate, ctx);
  cuda::linear_backward(f32(x), f32(w), f32(*dpre), f32(dx), f32(dw), nullptr, M, N, K, accumulate, ctx);
}

// ---- activations -----------------------------------------------------------------------------

void CudaBackend::activation_forward(const Tensor& x, Tensor& y, Activation act,
                                     kernels::Queue& q) {
  const std::int64_t n = x.numel();
  CudaQueue& cq = enter(q, Op::activation, x.dtype(), "activation", {{x, n, "x"}, {y, n, "y"}});
  cuda::activation_forward(f32(x), f32(y), n, act, cq.context());
}

void CudaBackend::activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx,
                                      Activation act, kernels::Queue& q) {
  // none: dx = dy, nothing saved.
  const bool uses_saved = act != Activation::none;
  const std::int64_t n = dy.numel();
  CudaQueue& cq = enter(q, Op::activation, dy.dtype(), "activation backward",
                        {{dy, n, "dy"}, {dx, n, "dx"}, {uses_saved ? &saved : nullptr, n, "saved"}});
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
  CudaQueue& cq = enter(q, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  ops::expect(cq.device(), op,
              {{x, s.batch * s.in_channels * s.height * s.width, "x"},
               {w, s.out_channels * s.in_channels * s.kernel_h * s.kernel_w, "w"},
               {b, s.out_channels, "b"},
               {y, s.batch * s.out_channels * s.out_height() * s.out_width(), "y"}});
  cuda::conv2d_forward(f32(x), f32(w), f32(b), f32(y), s, cq.context());
}

void CudaBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                                  Tensor& dw, Tensor* db, const Conv2dShape& s,
                                  kernels::Queue& q) {
  const char* op = "conv2d backward";
  CudaQueue& cq = enter(q, Op::conv2d, x.dtype(), op);
  require_nchw(s, op);
  s.validate();
  const std::int64_t nx = s.batch * s.in_channels * s.height * s.width;
  const std::int64_t nw = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
  ops::expect(cq.device(), op,
              {{x, nx, "x"}, {w, nw, "w"}, {dy, s.batch * s.out_channels * s.out_height() * s.out_width(), "dy"},
               {dx, nx, "dx"}, {dw, nw, "dw"}, {db, s.out_channels, "db"}});
  cuda::conv2d_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), s,
                        /*accumulate=*/true, cq.context());
}

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
  const std::int64_t n = x.numel();
  CudaQueue& cq = enter(q, Op::multiply, x.dtype(), "multiply", {{x, n, "x"}, {m, n, "m"}, {y, n, "y"}});
  cuda::multiply(f32(x), f32(m), f32(y), n, cq.context());
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y, kernels::Queue& q) {
  const std::int64_t n = a.numel();
  CudaQueue& cq = enter(q, Op::add, a.dtype(), "add", {{a, n, "a"}, {b, n, "b"}, {y, n, "y"}});
  cuda::add(f32(a), f32(b), f32(y), n, cq.context());
}

// relu(a + b) in one pass (Op::add_activation); act must be relu; y may alias a or b.
void CudaBackend::add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, kernels::Queue& q) {
  const char* op = "add+activation";
  CudaQueue& cq = enter(q, Op::add_activation, a.dtype(), op);
  ops::expect_relu(act, op);
  const std::int64_t n = a.numel();
  ops::expect(cq.device(), op, {{a, n, "a"}, {b, n, "b"}, {y, n, "y"}});
  cuda::add_relu(f32(a), f32(b), f32(y), n, cq.context());
}

// ---- the fused loss --------------------------------------------------------------------------

}  // namespace codistill::kernels::cuda
