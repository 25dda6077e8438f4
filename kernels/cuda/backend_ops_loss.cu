// The CUDA backend's op entry points (kernels/backend.hpp), the losses and the optimizer updates
// (fused distillation loss, fused linear + distillation head, SGD, AdamW): each checks what
// keeps a bad call from handing a kernel memory it cannot address (the queue is this backend's,
// every tensor is on the queue's device, in the dtype and with the element count the kernel
// reads: backend_ops_util.cuh), then queues the kernels of kernels/cuda/*.hpp on the queue's
// stream with the queue's context (stream, TF32, resources). Shapes beyond element counts are
// the layers' to validate. Gradients accumulate (accumulate = true): zeroing is the caller's
// Queue::zero.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/backend_ops_util.cuh"
#include "kernels/cuda/distill_head.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace codistill::kernels::cuda {

using ops::expect;
using ops::f32;

DistillLossResult CudaBackend::distill_loss(const Tensor& student,
                                            const std::vector<const Tensor*>& teachers,
                                            const Tensor& labels, Tensor* grad,
                                            const DistillLossParams& p, kernels::Queue& q) {
  const char* op = "distill_loss";
  const DType dt = student.dtype();
  CudaQueue& cq = enter(q, Op::distill_loss, dt, op);
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
  ops::expect(dev, op, {{labels, N, "labels", DType::i32}, {grad, N * V, "grad", dt}});
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
  CudaQueue& cq = enter(q, Op::linear_distill_head, hidden.dtype(), op);
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

// Out of place (UpdateSource), the state is first copied into the written tensors on the
// queue and then updated in place: one device copy more than the CPU loops, which read one
// array and write the other. No caller updates a device arena out of place today (its
// checkpoints copy the state to the host at the step, persist/worker_state.hpp); the copy
// keeps the kernels, and their SIMT tests, as they are.
static void copy_update_source(Tensor& value, Tensor* m, Tensor* v, const UpdateSource& from, kernels::Queue& q) {
  if (from.value) q.copy(value, *from.value);
  if (from.m) q.copy(*m, *from.m);
  if (from.v) q.copy(*v, *from.v);
}

void CudaBackend::sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum,
                             const kernels::SgdScalars& s, const UpdateSource& from, kernels::Queue& q) {
  const char* op = "sgd_update";
  const std::int64_t n = value.numel();
  CudaQueue& cq = enter(q, Op::sgd_update, value.dtype(), op,
                        {{value, n, "value"}, {grad, n, "grad"}, {momentum, n, "momentum"}});
  check_update_source(from, value, momentum, nullptr, op);
  copy_update_source(value, momentum, nullptr, from, q);
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
                               const kernels::AdamWScalars& s, const UpdateSource& from, kernels::Queue& q) {
  const char* op = "adamw_update";
  const std::int64_t n = value.numel();
  CudaQueue& cq = enter(q, Op::adamw_update, value.dtype(), op,
                        {{value, n, "value"}, {grad, n, "grad"}, {m, n, "m"}, {v, n, "v"}});
  check_update_source(from, value, &m, &v, op);
  copy_update_source(value, &m, &v, from, q);
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
