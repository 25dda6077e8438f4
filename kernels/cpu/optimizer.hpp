#pragma once
// Optimizer updates over flat arrays (a model's whole parameter arena at once), with the
// arithmetic of kernels/ops.hpp (SgdScalars, AdamWScalars) in the element type T: the
// scalars are cast to T once, as PyTorch's fused CPU kernels do. Every element is
// independent, so the fast path's OpenMP split cannot change a bit of the result.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

// An out-of-place update writes arrays of at least this many bytes with streaming stores
// (optimizer.cpp): they pass the caches, which would only hold them for the next step.
inline constexpr std::size_t kStreamMinBytes = std::size_t{32} << 20;

// momentum may be null when s.momentum == 0. The *_from arrays, where set, are what the
// update reads instead of the arrays it writes (out of place, kernels::UpdateSource); they
// are not written, and must not overlap the written arrays.
template <class T>
void sgd_update(T* p, const T* g, T* momentum, std::int64_t n, const SgdScalars& s, Impl impl = Impl::fast,
                const T* p_from = nullptr, const T* momentum_from = nullptr);

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWScalars& s, Impl impl = Impl::fast,
                  const T* p_from = nullptr, const T* m_from = nullptr, const T* v_from = nullptr);

// sum of x_i^2 in double. reference: in order; fast: each thread sums a fixed contiguous
// part, the parts added in thread order (the same bits run to run at the same threads).
template <class T>
double sum_squares(const T* x, std::int64_t n, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
