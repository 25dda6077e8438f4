// The fused linear + distillation head on CUDA (distill_head.hpp). Per call, on the queue's
// stream: one upload (label-check header, the teachers' logits slots), the label check over
// the whole batch, one download of its verdict and one synchronization (so that a bad label
// throws before any GEMM has touched dW); then per chunk of rows (plans/distill_head_plan.hpp)
// the student's and each teacher's logits (cuBLAS, bias through bias_activation.cu), the fused
// loss kernel on the chunk (distill_loss_launch.cuh: gradient in place of the student's
// logits, scaled by the whole batch's row count read on the device), dh and dW += (cuBLAS),
// db += (bias_activation.cu); finally the row sums, one download, one synchronization.
// A teacher whose weight is held as bf16 has its logits from that weight as stored
// (linear.cu's run_gemm_plan_bf16_weight: its hidden rows rounded, a bf16 cublasGemmEx).
// No kernel of its own: everything here is a library call or a kernel tested elsewhere.
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/linear.hpp"
#include "kernels/cuda/loss/distill_head.hpp"
#include "kernels/cuda/loss/distill_loss_launch.cuh"
#include "kernels/cuda/plans/distill_head_plan.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

constexpr const char* kOp = "linear_distill_head (cuda)";

[[noreturn]] void fail(const std::string& why) { throw std::invalid_argument(std::string(kOp) + ": " + why); }

void check_args(const HeadOperands& a, const HeadTeacherOperands* teachers, int K, const DistillHeadParams& p) {
  if (a.N <= 0 || a.H <= 0 || a.V <= 0 || a.N > INT_MAX || a.H > INT_MAX || a.V > INT_MAX)
    fail("need 0 < N, H, V < 2^31, got N=" + std::to_string(a.N) + " H=" + std::to_string(a.H) +
         " V=" + std::to_string(a.V));
  if (K < 0 || K > 4096) fail("K must be in [0, 4096], got " + std::to_string(K));
  if (!(p.loss.temperature > 0) || !std::isfinite(p.loss.temperature))
    fail("temperature must be finite and > 0, got " + std::to_string(p.loss.temperature));
  if (!a.hidden || !a.weight || !a.labels) fail("null hidden states, weight or labels");
  for (int k = 0; k < K; ++k) {
    const auto& t = teachers[k];
    if (!t.hidden || (!t.weight && !t.weight_bf16))
      fail("teacher " + std::to_string(k) + " has a null hidden or weight");
    // As the CPU's fast path: a weight held as bf16 is multiplied as it is, in bf16.
    if (t.weight_bf16 && p.teacher_compute != Compute::bf16)
      fail("teacher " + std::to_string(k) + "'s weight is bf16, which needs bf16 teacher compute (teacher_compute)");
    if (t.dim <= 0 || t.dim > INT_MAX) fail("teacher " + std::to_string(k) + " has hidden size " + std::to_string(t.dim));
  }
}

std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// The call's device memory, back to the cache when the call ends (stream-safe: a block
// freed while work that uses it is queued waits for that work, allocator.hpp).
struct DeviceBlock {
  void* ptr;
  int device;
  ~DeviceBlock() { cached_free(ptr, device); }
};

}  // namespace

DistillLossResult linear_distill_head(const HeadOperands& a, const HeadTeacherOperands* teachers, int K,
                                      const DistillHeadParams& p, const Context& ctx) {
  check_args(a, teachers, K, p);
  auto& res = resources_of(ctx, "linear_distill_head");
  detail::use_device(ctx);
  const cudaStream_t stream = detail::stream_of(ctx);
  const std::int64_t N = a.N, H = a.H, V = a.V;
  const std::int64_t chunk = distill_head_chunk_rows(N, V, K, sizeof(float), p.workspace_bytes);

  // Device block: 2 u64 header | 2 double sums | K logits-slot pointers | 2N float row
  // terms | (K + 1) logits slots of chunk x V floats (the student's first).
  const auto uK = static_cast<std::size_t>(K);
  const std::size_t off_ptrs = 32, upload = off_ptrs + 8 * uK;
  const std::size_t off_terms = align256(upload);
  const std::size_t off_logits = align256(off_terms + 8 * static_cast<std::size_t>(N));
  const std::size_t slot = static_cast<std::size_t>(chunk) * static_cast<std::size_t>(V);
  const DeviceBlock block{cached_malloc(off_logits + (uK + 1) * slot * sizeof(float), ctx.device), ctx.device};
  auto* base = static_cast<char*>(block.ptr);
  auto* header = reinterpret_cast<unsigned long long*>(base);
  auto* sums = reinterpret_cast<double*>(base + 16);
  auto* terms = reinterpret_cast<float*>(base + off_terms);
  auto* z = reinterpret_cast<float*>(base + off_logits);
  std::vector<const float*> slots(uK);
  for (std::size_t k = 0; k < uK; ++k) slots[k] = z + (k + 1) * slot;

  // The host side of the pinned scratch is idle: every op that uses it ends with a sync.
  const std::size_t download = (upload + 15) / 16 * 16;
  auto* host = static_cast<char*>(res.pinned_scratch(download + 32));
  const unsigned long long init[2] = {0, static_cast<unsigned long long>(N)};
  std::memcpy(host, init, sizeof init);
  std::memset(host + 16, 0, 16);
  if (K > 0) std::memcpy(host + off_ptrs, slots.data(), sizeof(float*) * uK);
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(base, host, upload, cudaMemcpyHostToDevice, stream));
  detail::queue_check_labels(a.labels, N, V, header, ctx);
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(host + download, base, 16, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  unsigned long long got[2];
  std::memcpy(got, host + download, sizeof got);
  if (got[1] < static_cast<unsigned long long>(N)) {
    std::int32_t bad = 0;
    CODISTILL_CUDA_CHECK(cudaMemcpy(&bad, a.labels + got[1], sizeof bad, cudaMemcpyDeviceToHost));
    throw std::out_of_range(std::string(kOp) + ": row " + std::to_string(got[1]) + " has label " +
                            std::to_string(bad) + ", expected -1 (ignore) or a class in [0, " + std::to_string(V) + ")");
  }
  const auto rows = static_cast<std::int64_t>(got[0]);
  if (rows == 0) {  // every row ignored: zero loss and a zero gradient, as distill_loss
    if (a.dhidden)
      CODISTILL_CUDA_CHECK(cudaMemsetAsync(a.dhidden, 0, sizeof(float) * N * H, stream));
    return {};
  }

  const bool grad = a.dhidden || a.dweight || a.dbias;
  // The teachers' logits compute as DistillHeadParams::teacher_compute says; the student's
  // as the queue does (ctx).
  Context teacher_ctx = ctx;
  teacher_ctx.bf16_gemm = p.teacher_compute == Compute::bf16;
  std::vector<std::int64_t> dims;
  for (int k = 0; k < K; ++k) dims.push_back(teachers[k].dim);
  const auto* const* slots_dev = reinterpret_cast<const float* const*>(base + off_ptrs);
  for (const plans::HeadChunk& c : plans::head_chunks(N, chunk)) {
    const plans::HeadChunkPlans pl = plans::distill_head_plans(c, V, H, dims);
    const std::int64_t oh = plans::operand_offset(c, H);
    GemmOperands fwd;
    fwd.x = a.hidden + oh, fwd.w = a.weight, fwd.y = z;
    run_gemm_plan(pl.student_logits, fwd, ctx);
    if (a.bias) bias_activation_forward(z, a.bias, nullptr, c.rows, V, Activation::none, ctx);
    for (int k = 0; k < K; ++k) {
      const auto& t = teachers[k];
      float* tk = z + static_cast<std::size_t>(k + 1) * slot;
      GemmOperands tf;
      tf.x = t.hidden + plans::operand_offset(c, t.dim), tf.w = t.weight, tf.y = tk;
      const plans::GemmPlan& tp = pl.teacher_logits[static_cast<std::size_t>(k)];
      if (t.weight_bf16) run_gemm_plan_bf16_weight(tp, tf.x, t.weight_bf16, tk, teacher_ctx);
      else run_gemm_plan(tp, tf, teacher_ctx);
      if (t.bias) bias_activation_forward(tk, t.bias, nullptr, c.rows, V, Activation::none, ctx);
    }
    detail::queue_distill_rows(z, slots.data(), slots_dev, K, a.labels + c.row0, grad ? z : nullptr, c.rows, V,
                               p.loss, header, terms + 2 * c.row0, ctx);
    if (!grad) continue;
    GemmOperands bwd;
    bwd.dy = z, bwd.w = a.weight, bwd.x = a.hidden + oh;
    bwd.dx = a.dhidden ? a.dhidden + oh : nullptr, bwd.dw = a.dweight;
    if (a.dhidden) run_gemm_plan(pl.dhidden, bwd, ctx);
    if (a.dweight) run_gemm_plan(pl.dweight, bwd, ctx);
    if (a.dbias) bias_activation_backward(z, nullptr, nullptr, a.dbias, c.rows, V, Activation::none,
                                          /*accumulate=*/true, ctx);
  }
  detail::queue_sum_rows(terms, N, sums, ctx);
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(host + download, sums, 16, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  double s[2];
  std::memcpy(s, host + download, sizeof s);
  DistillLossResult out;
  out.rows = rows;
  out.ce = s[0] / static_cast<double>(rows);
  out.distill = s[1] / static_cast<double>(rows);
  out.loss = p.loss.hard_weight * out.ce + p.loss.weight * out.distill;
  return out;
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::expect;
using ops::f32;

DistillLossResult CudaBackend::linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                                   const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                                   Tensor* dhidden, Tensor* dweight, Tensor* dbias,
                                                   const DistillHeadParams& p, kernels::Queue& q) {
  const char* op = "linear_distill_head";
  CudaQueue& cq = enter(q, Op::linear_distill_head, hidden.dtype(), op);
  check_distill_head(hidden, weight, bias, teachers, labels, dhidden, dweight, dbias, "cuda");
  const Device dev = cq.device();
  auto on_device = [&](const Tensor* t, const char* name, DType dt = DType::f32) {
    if (t) expect(*t, dev, dt, t->numel(), op, name);
  };
  on_device(&hidden, "hidden"), on_device(&weight, "weight"), on_device(bias, "bias");
  on_device(dhidden, "dhidden"), on_device(dweight, "dweight"), on_device(dbias, "dbias");
  expect(labels, dev, DType::i32, hidden.dim(0), op, "labels");
  std::vector<HeadTeacherOperands> ts;
  for (const HeadTeacher& t : teachers) {
    // A teacher's weight may be held as bf16 (check_distill_head allowed it beside float32).
    const bool bf16_w = t.weight->dtype() == DType::bf16;
    if (bf16_w) require_support(*this, Op::linear_distill_head_bf16_teachers, hidden.dtype(), op);
    on_device(t.hidden, "teacher hidden"), on_device(t.bias, "teacher bias");
    on_device(t.weight, "teacher weight", bf16_w ? DType::bf16 : DType::f32);
    ts.push_back({f32(*t.hidden), bf16_w ? nullptr : f32(*t.weight), f32(t.bias), t.hidden->dim(1),
                  bf16_w ? static_cast<const std::uint16_t*>(t.weight->raw()) : nullptr});
  }
  HeadOperands a;
  a.hidden = f32(hidden), a.weight = f32(weight), a.bias = f32(bias);
  a.N = hidden.dim(0), a.H = hidden.dim(1), a.V = weight.dim(0);
  a.labels = static_cast<const std::int32_t*>(labels.raw());
  a.dhidden = f32(dhidden), a.dweight = f32(dweight), a.dbias = f32(dbias);
  return cuda::linear_distill_head(a, ts.data(), static_cast<int>(ts.size()), p, cq.context());
}

}  // namespace codistill::kernels::cuda
