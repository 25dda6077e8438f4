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

}  // namespace codistill::kernels::cpu
