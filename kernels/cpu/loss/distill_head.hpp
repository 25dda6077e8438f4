#pragma once
// The fused linear + distillation head on the CPU (kernels/ops.hpp, DistillHeadParams):
// hidden states -> logits -> the loss of DESIGN.md section 6 -> gradients with respect to
// the hidden states and the head, never holding the logits of all N rows.
//   reference: one row at a time, in double: the row's student and teacher logits, its
//              loss terms and logits gradient, then dh for the row and dW, db summed in
//              double over the batch (written once at the end). Obviously correct, O(V)
//              memory beyond the dW accumulator, and slow: for tests.
//   fast:      chunks of distill_head_chunk_rows rows. Per chunk: the student's logits
//              (one GEMM, x W^T with the transpose a BLAS flag) and each teacher's (its own
//              hidden size), the fused loss rows (distill_loss_rows) writing the logits
//              gradient in place of the student's logits, then dh_chunk = dz W and
//              dW += dz^T h_chunk (no transposed copies: BLAS flags on row-major data).
//              The GEMMs split their work over OpenMP threads along V, the loss over rows.
// Both check every label before writing anything and average over the non-ignored rows of
// the whole batch.
// bf16 / teacher_bf16 (float only; null for float32): the student's GEMMs (its logits, dh,
// dW; the logits gradient rounded as an operand) and the teachers' logits GEMMs multiply
// bf16-rounded operands with float32 accumulation (kernels/ops.hpp, Compute::bf16); the
// loss, its row sums and db stay float32. The reference rounds the same operands, then
// computes in double.
#include <cstdint>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/loss/distill_loss.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

using DistillHeadParams = kernels::DistillHeadParams;  // kernels/ops.hpp

// One teacher: hidden [N, dim], weight [V, dim], bias [V] or null. A teacher whose weight is
// held as bf16 (Op::linear_distill_head_bf16_teachers; T float) has weight_bf16 instead of
// weight: the fast path reads it as stored through teacher_bf16 (which must be set), the
// reference widens it.
template <class T>
struct HeadTeacherPtrs {
  const T* hidden = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
  std::int64_t dim = 0;
  const std::uint16_t* weight_bf16 = nullptr;
};

// h [N, H], w [V, H], b [V] or null; labels [N]; dh [N, H] (overwritten), dw [V, H] and
// db [V] (accumulated), each may be null. Throws std::invalid_argument for bad sizes and
// std::out_of_range for a label outside [-1, V), naming the row, before writing anything.
template <class T>
DistillLossResult linear_distill_head(const T* h, const T* w, const T* b, std::int64_t N,
                                      std::int64_t H, std::int64_t V,
                                      const HeadTeacherPtrs<T>* teachers, int K,
                                      const std::int32_t* labels, T* dh, T* dw, T* db,
                                      const DistillHeadParams& p, Impl impl = Impl::fast,
                                      Bf16Gemm* bf16 = nullptr, Bf16Gemm* teacher_bf16 = nullptr);

}  // namespace codistill::kernels::cpu
