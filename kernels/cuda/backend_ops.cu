// The CUDA backend's op entry points (kernels/backend.hpp): each checks what keeps a bad
// call from handing a kernel memory it cannot address (the queue is this backend's, every
// tensor is on the queue's device, in the dtype and with the element count the kernel
// reads), then queues the kernels of kernels/cuda/*.hpp on the queue's stream with the
// queue's context (stream, TF32, resources). Shapes beyond element counts are the layers'
// to validate. Gradients accumulate (accumulate = true): zeroing is the caller's
// Queue::zero.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/avgpool.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/distill_head.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/linear.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace codistill::kernels::cuda {

namespace {

// Throws std::invalid_argument("<op> (cuda): <name> is <shape dtype device>, expected ...")
// unless t holds `numel` elements of `dtype` on `device`.
void expect(const Tensor& t, Device device, DType dtype, std::int64_t numel, const char* op,
            const char* name) {
  if (t.device() == device && t.dtype() == dtype && t.numel() == numel && (numel == 0 || t.raw()))
    return;
  throw std::invalid_argument(std::string(op) + " (cuda): " + name + " is " +
                              shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " +
                              t.device().str() + ", expected " + std::to_string(numel) + " " +
                              dtype_name(dtype) + " elements on " + device.str());
}

const float* f32(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* f32(Tensor& t) { return static_cast<float*>(t.raw()); }
const float* f32(const Tensor* t) { return t ? f32(*t) : nullptr; }
float* f32(Tensor* t) { return t ? f32(*t) : nullptr; }

}  // namespace

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
                                  Tensor* dpre, kernels::Queue& q) {
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
    cuda::linear_backward(f32(x), f32(w), f32(dy), f32(dx), f32(dw), f32(db), M, N, K,
                          /*accumulate=*/true, ctx);
    return;
  }
  if (!saved || !dpre)
    throw std::invalid_argument("linear backward (cuda): a fused activation needs saved and dpre");
  expect(*saved, dev, DType::f32, M * N, op, "saved");
  expect(*dpre, dev, DType::f32, M * N, op, "dpre");
  // dpre = dy * act'(saved) and db += colsum(dpre) in one pass, then the GEMMs on dpre.
  bias_activation_backward(f32(dy), f32(*saved), f32(dpre), f32(db), M, N, act,
                           /*accumulate=*/true, ctx);
  cuda::linear_backward(f32(x), f32(w), f32(*dpre), f32(dx), f32(dw), nullptr, M, N, K,
                        /*accumulate=*/true, ctx);
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

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                                 const Conv2dShape& s, kernels::Queue& q) {
  const char* op = "conv2d";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::conv2d, x.dtype(), op);
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

void CudaBackend::batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                    Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                    bool training, const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::batchnorm, x.dtype(), op);
  s.validate(training);
  const std::int64_t n = s.batch * s.channels * s.spatial, C = s.channels;
  expect(x, cq.device(), DType::f32, n, op, "x");
  expect(y, cq.device(), DType::f32, n, op, "y");
  expect(gamma, cq.device(), DType::f32, C, op, "gamma");
  expect(beta, cq.device(), DType::f32, C, op, "beta");
  expect(running_mean, cq.device(), DType::f32, C, op, "running_mean");
  expect(running_var, cq.device(), DType::f32, C, op, "running_var");
  expect(save_mean, cq.device(), DType::f32, C, op, "save_mean");
  expect(save_invstd, cq.device(), DType::f32, C, op, "save_invstd");
  cuda::batchnorm_forward(f32(x), f32(gamma), f32(beta), f32(running_mean), f32(running_var), f32(y),
                          f32(save_mean), f32(save_invstd), training, s, cq.context());
}

void CudaBackend::batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, bool training, const BatchNormShape& s, kernels::Queue& q) {
  const char* op = "batchnorm backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::batchnorm, dy.dtype(), op);
  s.validate(training);
  const std::int64_t n = s.batch * s.channels * s.spatial, C = s.channels;
  expect(x, cq.device(), DType::f32, n, op, "x");
  expect(dy, cq.device(), DType::f32, n, op, "dy");
  if (dx) expect(*dx, cq.device(), DType::f32, n, op, "dx");
  expect(gamma, cq.device(), DType::f32, C, op, "gamma");
  expect(save_mean, cq.device(), DType::f32, C, op, "save_mean");
  expect(save_invstd, cq.device(), DType::f32, C, op, "save_invstd");
  expect(dgamma, cq.device(), DType::f32, C, op, "dgamma");
  expect(dbeta, cq.device(), DType::f32, C, op, "dbeta");
  cuda::batchnorm_backward(f32(x), f32(gamma), f32(save_mean), f32(save_invstd), f32(dy), f32(dx), f32(dgamma),
                           f32(dbeta), training, s, cq.context());
}

// ---- global average pooling --------------------------------------------------------------------

void CudaBackend::global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                                         kernels::Queue& q) {
  const char* op = "global_avgpool";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::global_avgpool, x.dtype(), op);
  expect(x, cq.device(), DType::f32, rows * spatial, op, "x");
  expect(y, cq.device(), DType::f32, rows, op, "y");
  cuda::global_avgpool_forward(f32(x), f32(y), rows, spatial, cq.context());
}

void CudaBackend::global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                                          kernels::Queue& q) {
  const char* op = "global_avgpool backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::global_avgpool, dy.dtype(), op);
  expect(dy, cq.device(), DType::f32, rows, op, "dy");
  expect(dx, cq.device(), DType::f32, rows * spatial, op, "dx");
  cuda::global_avgpool_backward(f32(dy), f32(dx), rows, spatial, cq.context());
}

// ---- layer normalization -----------------------------------------------------------------------

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                    Tensor& save_mean, Tensor& save_invstd, const LayerNormShape& s,
                                    kernels::Queue& q) {
  const char* op = "layernorm";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::layernorm, x.dtype(), op);
  s.validate();
  expect(x, cq.device(), DType::f32, s.rows * s.features, op, "x");
  expect(y, cq.device(), DType::f32, s.rows * s.features, op, "y");
  expect(gamma, cq.device(), DType::f32, s.features, op, "gamma");
  expect(beta, cq.device(), DType::f32, s.features, op, "beta");
  expect(save_mean, cq.device(), DType::f32, s.rows, op, "save_mean");
  expect(save_invstd, cq.device(), DType::f32, s.rows, op, "save_invstd");
  cuda::layernorm_forward(f32(x), f32(gamma), f32(beta), f32(y), f32(save_mean), f32(save_invstd), s,
                          cq.context());
}

void CudaBackend::layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, const LayerNormShape& s, kernels::Queue& q) {
  const char* op = "layernorm backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::layernorm, dy.dtype(), op);
  s.validate();
  expect(x, cq.device(), DType::f32, s.rows * s.features, op, "x");
  expect(dy, cq.device(), DType::f32, s.rows * s.features, op, "dy");
  if (dx) expect(*dx, cq.device(), DType::f32, s.rows * s.features, op, "dx");
  expect(gamma, cq.device(), DType::f32, s.features, op, "gamma");
  expect(save_mean, cq.device(), DType::f32, s.rows, op, "save_mean");
  expect(save_invstd, cq.device(), DType::f32, s.rows, op, "save_invstd");
  expect(dgamma, cq.device(), DType::f32, s.features, op, "dgamma");
  expect(dbeta, cq.device(), DType::f32, s.features, op, "dbeta");
  cuda::layernorm_backward(f32(x), f32(gamma), f32(save_mean), f32(save_invstd), f32(dy), f32(dx), f32(dgamma),
                           f32(dbeta), s, cq.context());
}

// ---- embedding and causal attention ----------------------------------------------------------

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                                    kernels::Queue& q) {
  const char* op = "embedding";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::embedding, table.dtype(), op);
  s.validate();
  expect(ids, cq.device(), DType::i32, s.rows, op, "ids");
  expect(table, cq.device(), DType::f32, s.vocab * s.dim, op, "table");
  expect(y, cq.device(), DType::f32, s.rows * s.dim, op, "y");
  cuda::embedding_forward(static_cast<const std::int32_t*>(ids.raw()), f32(table), f32(y), s, cq.context());
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                                     kernels::Queue& q) {
  const char* op = "embedding backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::embedding, dy.dtype(), op);
  s.validate();
  expect(ids, cq.device(), DType::i32, s.rows, op, "ids");
  expect(dy, cq.device(), DType::f32, s.rows * s.dim, op, "dy");
  expect(dtable, cq.device(), DType::f32, s.vocab * s.dim, op, "dtable");
  cuda::embedding_backward(static_cast<const std::int32_t*>(ids.raw()), f32(dy), f32(dtable), s, cq.context());
}

void CudaBackend::attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s,
                                    kernels::Queue& q) {
  const char* op = "causal_attention";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::causal_attention, qkv.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model(), P = s.batch * s.heads * s.seq * s.seq;
  expect(qkv, cq.device(), DType::f32, s.rows() * 3 * D, op, "qkv");
  expect(y, cq.device(), DType::f32, s.rows() * D, op, "y");
  expect(probs, cq.device(), DType::f32, P, op, "probs");
  cuda::attention_forward(f32(qkv), f32(y), f32(probs), s, cq.context());
}

void CudaBackend::attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv,
                                     Tensor& scratch, const AttentionShape& s, kernels::Queue& q) {
  const char* op = "causal_attention backward";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::causal_attention, dy.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model(), P = s.batch * s.heads * s.seq * s.seq;
  expect(qkv, cq.device(), DType::f32, s.rows() * 3 * D, op, "qkv");
  expect(probs, cq.device(), DType::f32, P, op, "probs");
  expect(dy, cq.device(), DType::f32, s.rows() * D, op, "dy");
  expect(dqkv, cq.device(), DType::f32, s.rows() * 3 * D, op, "dqkv");
  expect(scratch, cq.device(), DType::f32, P, op, "scratch");
  cuda::attention_backward(f32(qkv), f32(probs), f32(dy), f32(dqkv), f32(scratch), s, cq.context());
}

// ---- softmax: no CUDA kernel ---------------------------------------------------------------

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

// ---- the fused loss --------------------------------------------------------------------------

DistillLossResult CudaBackend::distill_loss(const Tensor& student,
                                            const std::vector<const Tensor*>& teachers,
                                            const Tensor& labels, Tensor* grad,
                                            const DistillLossParams& p, kernels::Queue& q) {
  const char* op = "distill_loss";
  CudaQueue& cq = queue_of(q, op);
  const DType dt = student.dtype();
  require_support(*this, Op::distill_loss, dt, op);
  if (student.ndim() != 2)
    throw std::invalid_argument("distill_loss (cuda): student logits must be [N, V], got " +
                                shape_str(student.shape()));
  const Device dev = cq.device();
  const std::int64_t N = student.dim(0), V = student.dim(1);
  expect(student, dev, dt, N * V, op, "student");
  for (const Tensor* t : teachers) {
    if (!t) throw std::invalid_argument("distill_loss (cuda): a teacher is null");
    expect(*t, dev, dt, N * V, op, "teacher");
  }
  expect(labels, dev, DType::i32, N, op, "labels");
  if (grad) expect(*grad, dev, dt, N * V, op, "grad");
  const auto K = static_cast<int>(teachers.size());
  const auto* y = static_cast<const std::int32_t*>(labels.raw());
  const cuda::Context ctx = cq.context();
  // The launcher validates the labels, runs the loss and waits for the result.
  if (dt == DType::bf16) {
    std::vector<const std::uint16_t*> ts;
    ts.reserve(teachers.size());
    for (const Tensor* t : teachers) ts.push_back(static_cast<const std::uint16_t*>(t->raw()));
    return cuda::distill_loss_bf16(static_cast<const std::uint16_t*>(student.raw()), ts.data(), K,
                                   y, grad ? static_cast<std::uint16_t*>(grad->raw()) : nullptr,
                                   N, V, p, ctx);
  }
  std::vector<const float*> ts;
  ts.reserve(teachers.size());
  for (const Tensor* t : teachers) ts.push_back(f32(*t));
  return cuda::distill_loss(f32(student), ts.data(), K, y, f32(grad), N, V, p, ctx);
}

// ---- the fused linear + distillation head ----------------------------------------------------

DistillLossResult CudaBackend::linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                                   const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                                   Tensor* dhidden, Tensor* dweight, Tensor* dbias,
                                                   const DistillHeadParams& p, kernels::Queue& q) {
  const char* op = "linear_distill_head";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::linear_distill_head, hidden.dtype(), op);
  check_distill_head(hidden, weight, bias, teachers, labels, dhidden, dweight, dbias, "cuda");
  const Device dev = cq.device();
  auto on_device = [&](const Tensor* t, const char* name) {
    if (t) expect(*t, dev, DType::f32, t->numel(), op, name);
  };
  on_device(&hidden, "hidden"), on_device(&weight, "weight"), on_device(bias, "bias");
  on_device(dhidden, "dhidden"), on_device(dweight, "dweight"), on_device(dbias, "dbias");
  expect(labels, dev, DType::i32, hidden.dim(0), op, "labels");
  std::vector<HeadTeacherOperands> ts;
  for (const HeadTeacher& t : teachers) {
    on_device(t.hidden, "teacher hidden"), on_device(t.weight, "teacher weight"), on_device(t.bias, "teacher bias");
    ts.push_back({f32(*t.hidden), f32(*t.weight), f32(t.bias), t.hidden->dim(1)});
  }
  HeadOperands a;
  a.hidden = f32(hidden), a.weight = f32(weight), a.bias = f32(bias);
  a.N = hidden.dim(0), a.H = hidden.dim(1), a.V = weight.dim(0);
  a.labels = static_cast<const std::int32_t*>(labels.raw());
  a.dhidden = f32(dhidden), a.dweight = f32(dweight), a.dbias = f32(dbias);
  return cuda::linear_distill_head(a, ts.data(), static_cast<int>(ts.size()), p, cq.context());
}

// ---- optimizers: one slice, one launch ---------------------------------------------------------

void CudaBackend::sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum,
                             const kernels::SgdScalars& s, kernels::Queue& q) {
  const char* op = "sgd_update";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::sgd_update, value.dtype(), op);
  const std::int64_t n = value.numel();
  expect(value, cq.device(), DType::f32, n, op, "value");
  expect(grad, cq.device(), DType::f32, n, op, "grad");
  if (momentum) expect(*momentum, cq.device(), DType::f32, n, op, "momentum");
  // The casts of the CPU path's float instantiation (codistill/optim/sgd.cpp).
  cuda::SgdScalars sc;
  sc.lr = static_cast<float>(s.lr);
  sc.weight_decay = static_cast<float>(s.weight_decay);
  sc.momentum = static_cast<float>(s.momentum);
  sc.nesterov = s.nesterov;
  ParamSlice slice;
  slice.value = f32(value);
  slice.grad = f32(grad);
  slice.slot0 = f32(momentum);
  slice.n = n;
  sgd_step({slice}, sc, cq.context());
}

void CudaBackend::adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v,
                               const kernels::AdamWScalars& s, kernels::Queue& q) {
  const char* op = "adamw_update";
  CudaQueue& cq = queue_of(q, op);
  require_support(*this, Op::adamw_update, value.dtype(), op);
  const std::int64_t n = value.numel();
  expect(value, cq.device(), DType::f32, n, op, "value");
  expect(grad, cq.device(), DType::f32, n, op, "grad");
  expect(m, cq.device(), DType::f32, n, op, "m");
  expect(v, cq.device(), DType::f32, n, op, "v");
  // The casts of the CPU path's float instantiation (codistill/optim/adamw.cpp).
  cuda::AdamWScalars sc;
  sc.decay = static_cast<float>(s.decay);
  sc.beta1 = static_cast<float>(s.beta1);
  sc.beta2 = static_cast<float>(s.beta2);
  sc.step_size = static_cast<float>(s.step_size);
  sc.inv_sqrt_bc2 = static_cast<float>(s.inv_sqrt_bc2);
  sc.eps = static_cast<float>(s.eps);
  ParamSlice slice;
  slice.value = f32(value);
  slice.grad = f32(grad);
  slice.slot0 = f32(m);
  slice.slot1 = f32(v);
  slice.n = n;
  adamw_step({slice}, sc, cq.context());
}

}  // namespace codistill::kernels::cuda
