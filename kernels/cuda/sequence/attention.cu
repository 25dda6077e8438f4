// The causal attention core on CUDA (attention.hpp): the planned cuBLAS products
// (plans/attention_plan.hpp, passed verbatim) around the softmax kernels
// (device/attention.cuh), all queued on the queue's stream.
//   forward:  S = scale q k^T into probs; causal softmax in place; y = P v.
//   backward: dP = dy v^T into scratch; dS = P (dP - rowsum(P dP)) in place;
//             dq = scale dS k, dk = scale dS^T q, dv = P^T dy into dqkv (overwritten).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <vector>

#include "kernels/cuda/sequence/attention.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/attention.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/plans/attention_plan.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

using plans::AttnBuffer;

// The call's buffers by role: inputs readable, outputs writable (a plan that reads a buffer
// the call did not pass, or writes an input, is a bug in the plan).
struct Buffers {
  const float *qkv = nullptr, *dy = nullptr, *probs_in = nullptr;
  float *y = nullptr, *probs_out = nullptr, *scratch = nullptr, *dqkv = nullptr;

  const float* in(AttnBuffer b) const {
    const float* p = b == AttnBuffer::qkv ? qkv
                   : b == AttnBuffer::dy ? dy
                   : b == AttnBuffer::probs ? (probs_in ? probs_in : probs_out)
                   : b == AttnBuffer::scratch ? scratch
                                              : nullptr;
    if (!p) throw std::logic_error("causal_attention (cuda): a plan reads a buffer the call does not have");
    return p;
  }
  float* out(AttnBuffer b) const {
    float* p = b == AttnBuffer::y ? y
             : b == AttnBuffer::probs ? probs_out
             : b == AttnBuffer::scratch ? scratch
             : b == AttnBuffer::dqkv ? dqkv
                                     : nullptr;
    if (!p) throw std::logic_error("causal_attention (cuda): a plan writes a buffer the call does not have");
    return p;
  }
};

cublasOperation_t op_of(plans::Trans t) { return t == plans::Trans::transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Each planned call exactly as planned. TF32 only when the queue allows it, as linear.cu.
void run(const std::vector<plans::BatchedGemm>& calls, const Buffers& buf, const Context& ctx) {
  cublasHandle_t h = resources_of(ctx, "causal_attention").cublas();
  const cublasComputeType_t compute = ctx.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  for (const plans::BatchedGemm& g : calls)
    CODISTILL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, op_of(g.transa), op_of(g.transb), static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k),
        &g.alpha, buf.in(g.a.buffer) + g.a.offset, CUDA_R_32F, static_cast<int>(g.a.ld), g.a.stride,
        buf.in(g.b.buffer) + g.b.offset, CUDA_R_32F, static_cast<int>(g.b.ld), g.b.stride, &g.beta,
        buf.out(g.c.buffer) + g.c.offset, CUDA_R_32F, static_cast<int>(g.c.ld), g.c.stride,
        static_cast<int>(g.batch), compute, CUBLAS_GEMM_DEFAULT));
}

std::int64_t score_rows(const AttentionShape& s) { return s.batch * s.heads * s.seq; }

}  // namespace

void attention_forward(const float* qkv, float* y, float* probs, const AttentionShape& s, const Context& ctx) {
  s.validate();
  if (s.batch == 0) return;
  detail::use_device(ctx);
  Buffers buf;
  buf.qkv = qkv, buf.y = y, buf.probs_out = probs;
  const plans::AttentionForwardPlans p = plans::attention_forward_plans(s);
  run(p.scores, buf, ctx);
  const std::int64_t rows = score_rows(s);
  const auto shape = shapes::attention_rows(rows);
  device::causal_softmax_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(probs, rows, s.seq);
  CODISTILL_CUDA_LAUNCH_CHECK();
  run(p.values, buf, ctx);
}

void attention_backward(const float* qkv, const float* probs, const float* dy, float* dqkv, float* scratch,
                        const AttentionShape& s, const Context& ctx) {
  s.validate();
  if (s.batch == 0) return;
  detail::use_device(ctx);
  Buffers buf;
  buf.qkv = qkv, buf.probs_in = probs, buf.dy = dy, buf.dqkv = dqkv, buf.scratch = scratch;
  const plans::AttentionBackwardPlans p = plans::attention_backward_plans(s);
  run(p.dprobs, buf, ctx);
  const std::int64_t rows = score_rows(s);
  const auto shape = shapes::attention_rows(rows);
  device::causal_softmax_backward_kernel<<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(probs, scratch,
                                                                                                      rows, s.seq);
  CODISTILL_CUDA_LAUNCH_CHECK();
  run(p.dq, buf, ctx);
  run(p.dk, buf, ctx);
  run(p.dv, buf, ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s,
                                    kernels::Queue& q) {
  const char* op = "causal_attention";
  CudaQueue& cq = enter(q, Op::causal_attention, qkv.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model(), P = s.batch * s.heads * s.seq * s.seq;
  ops::expect(cq.device(), op, {{qkv, s.rows() * 3 * D, "qkv"}, {y, s.rows() * D, "y"}, {probs, P, "probs"}});
  cuda::attention_forward(f32(qkv), f32(y), f32(probs), s, cq.context());
}

void CudaBackend::attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv,
                                     Tensor& scratch, const AttentionShape& s, kernels::Queue& q) {
  const char* op = "causal_attention backward";
  CudaQueue& cq = enter(q, Op::causal_attention, dy.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model(), P = s.batch * s.heads * s.seq * s.seq;
  ops::expect(cq.device(), op,
              {{qkv, s.rows() * 3 * D, "qkv"}, {probs, P, "probs"}, {dy, s.rows() * D, "dy"},
               {dqkv, s.rows() * 3 * D, "dqkv"}, {scratch, P, "scratch"}});
  cuda::attention_backward(f32(qkv), f32(probs), f32(dy), f32(dqkv), f32(scratch), s, cq.context());
}

}  // namespace codistill::kernels::cuda
