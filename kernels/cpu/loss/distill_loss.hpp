#pragma once
// The fused distillation loss of DESIGN.md section 6, forward and backward in one pass
// over the rows. For row r with student logits z, label y, K teacher rows t_k:
//   q_T   = (1/K) sum_k softmax(t_k / T)
//   loss  = h * CE(y, softmax(z)) + a * T^2 * KL(q_T || softmax(z / T))
//   dz    = h * (softmax(z) - onehot(y)) + a * T * (softmax(z / T) - q_T)
// averaged over the rows whose label is not -1 (ignored rows get a zero gradient).
// K = 0 (no teacher, or before burn-in) leaves only the hard term.
// A label outside [-1, V) throws std::out_of_range naming the row and the label.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

using DistillLossParams = kernels::DistillLossParams;  // kernels/ops.hpp
using DistillLossResult = kernels::DistillLossResult;

// student, grad: [N, V]; teachers: K pointers to [N, V]; labels: [N].
// grad may alias student (in place). grad may be null (forward only).
template <class T>
DistillLossResult distill_loss(const T* student, const T* const* teachers, int K,
                               const std::int32_t* labels, T* grad, std::int64_t N,
                               std::int64_t V, const DistillLossParams& p,
                               Impl impl = Impl::fast);

// ---- for the fused linear + distillation head (distill_head.hpp), which runs the loss on
// chunks of a batch ----

// Checks every label of the batch (the same rule and message as distill_loss, under the
// name `op`) and returns the number of rows counted (labels not -1).
std::int64_t count_distill_rows(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                                const char* op);

struct DistillLossSums {
  double ce = 0;  // sum over the rows of their cross-entropy
  double kl = 0;  // sum over the rows of T^2 KL
};

// distill_loss on rows [0, N) of a batch whose labels were checked already: the gradient is
// scaled by 1 / batch_rows (the rows counted in the whole batch, > 0), and the per-row terms
// come back as sums, so that chunks of a batch add up to the batch's loss exactly as
// distill_loss over all of it (each row's terms and gradient are the same bits).
template <class T>
DistillLossSums distill_loss_rows(const T* student, const T* const* teachers, int K,
                                  const std::int32_t* labels, T* grad, std::int64_t N,
                                  std::int64_t V, const DistillLossParams& p,
                                  std::int64_t batch_rows, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
