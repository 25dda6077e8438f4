#pragma once
// The cuBLAS calls of the fused linear + distillation head (distill_head.cu) as data: how
// the batch is cut into chunks of rows and, per chunk, the products on that chunk's rows:
//   student logits  z   [rows, V]  = h[row0:row0+rows] W^T     (linear_forward plan)
//   teacher logits  t_k [rows, V]  = h_k[row0:...] W_k^T       (each its own hidden size)
//   dh[row0:row0+rows] [rows, H]   = dz W                      (linear_backward_input)
//   dW [V, H]                     += dz^T h[row0:...]           (linear_backward_weight, beta 1)
// The chunk's operands are views: the row-major rows [row0, row0 + rows) of h, h_k and dh
// start row0 * H (row0 * H_k) elements in and keep their row stride, so every leading
// dimension is the full tensor's (H, H_k, V), the same as an unchunked call; the logits
// live in the workspace from its start. distill_head.cu passes these plans verbatim, with
// the operands offset by operand_offset; tests/kernels/cuda_plans runs them through OpenBLAS
// in column-major mode against the unchunked products. CUDA-free.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/plans/gemm_plan.hpp"

namespace codistill::kernels::cuda::plans {

struct HeadChunk {
  std::int64_t row0 = 0, rows = 0;
};

// [0, N) in chunks of chunk_rows rows (the last may be shorter); chunk_rows >= 1.
inline std::vector<HeadChunk> head_chunks(std::int64_t N, std::int64_t chunk_rows) {
  std::vector<HeadChunk> out;
  for (std::int64_t r0 = 0; r0 < N; r0 += chunk_rows) out.push_back({r0, std::min(chunk_rows, N - r0)});
  return out;
}

// Elements from the start of a row-major [N, D] tensor to row row0 of the chunk.
inline std::int64_t operand_offset(const HeadChunk& c, std::int64_t D) { return c.row0 * D; }

struct HeadChunkPlans {
  GemmPlan student_logits;               // x = h rows, w = W, y = z
  std::vector<GemmPlan> teacher_logits;  // x = h_k rows, w = W_k, y = t_k
  GemmPlan dhidden;                      // dy = dz, w = W, dx = dh rows
  GemmPlan dweight;                      // dy = dz, x = h rows, dw = dW (accumulated)
};

// teacher_dims: each teacher's hidden size H_k.
inline HeadChunkPlans distill_head_plans(const HeadChunk& c, std::int64_t V, std::int64_t H,
                                         const std::vector<std::int64_t>& teacher_dims) {
  HeadChunkPlans p;
  p.student_logits = linear_forward(c.rows, V, H);
  for (std::int64_t Hk : teacher_dims) p.teacher_logits.push_back(linear_forward(c.rows, V, Hk));
  p.dhidden = linear_backward_input(c.rows, V, H);
  p.dweight = linear_backward_weight(c.rows, V, H, /*accumulate=*/true);
  return p;
}

}  // namespace codistill::kernels::cuda::plans
