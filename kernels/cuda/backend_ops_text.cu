// The CUDA backend's op entry points (kernels/backend.hpp), the language-model ops (embedding,
// causal attention): each checks what keeps a bad call from handing a kernel memory it cannot
// address (the queue is this backend's, every tensor is on the queue's device, in the dtype and
// with the element count the kernel reads: backend_ops_util.cuh), then queues the kernels of
// kernels/cuda/*.hpp on the queue's stream with the queue's context (stream, TF32, resources).
// Shapes beyond element counts are the layers' to validate. Gradients accumulate (accumulate =
// true): zeroing is the caller's Queue::zero.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/backend_ops_util.cuh"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/embedding.hpp"

namespace codistill::kernels::cuda {

using ops::f32;

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                                    kernels::Queue& q) {
  const char* op = "embedding";
  CudaQueue& cq = enter(q, Op::embedding, table.dtype(), op);
  s.validate();
  ops::expect(cq.device(), op,
              {{ids, s.rows, "ids", DType::i32}, {table, s.vocab * s.dim, "table"}, {y, s.rows * s.dim, "y"}});
  cuda::embedding_forward(static_cast<const std::int32_t*>(ids.raw()), f32(table), f32(y), s, cq.context());
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                                     kernels::Queue& q) {
  const char* op = "embedding backward";
  CudaQueue& cq = enter(q, Op::embedding, dy.dtype(), op);
  s.validate();
  ops::expect(cq.device(), op,
              {{ids, s.rows, "ids", DType::i32}, {dy, s.rows * s.dim, "dy"}, {dtable, s.vocab * s.dim, "dtable"}});
  cuda::embedding_backward(static_cast<const std::int32_t*>(ids.raw()), f32(dy), f32(dtable), s, cq.context());
}

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

// ---- softmax: no CUDA kernel ---------------------------------------------------------------

}  // namespace codistill::kernels::cuda
