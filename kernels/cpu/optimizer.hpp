#pragma once
// Optimizer updates over flat arrays (a model's whole parameter arena at once), with the
// arithmetic of kernels/ops.hpp (SgdScalars, AdamWScalars) in the element type T: the
// scalars are cast to T once, as PyTorch's fused CPU kernels do. Every element is
// independent, so the fast path's OpenMP split cannot change a bit of the result.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

// momentum may be null when s.momentum == 0.
template <class T>
void sgd_update(T* p, const T* g, T* momentum, std::int64_t n, const SgdScalars& s, Impl impl = Impl::fast);

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWScalars& s, Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
