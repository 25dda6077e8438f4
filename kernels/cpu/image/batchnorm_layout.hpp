#pragma once
// How a batch-norm tensor's channels lie in memory, and when to spread channels over
// threads; private to batchnorm.cpp and batchnorm_sync.cpp, which walk the same layout
// and must agree on it.
#include <omp.h>

#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu::batchnorm_layout {

// Below this many elements in all, starting threads costs more than one thread's loop.
inline constexpr std::int64_t kParallelMin = 1 << 14;

// Channel c's values are `batch` runs of `spatial` contiguous elements, C*S apart.
struct Layout {
  std::int64_t N, C, S;
  std::int64_t at(std::int64_t n, std::int64_t c) const { return (n * C + c) * S; }
};

inline Layout layout_of(const BatchNormShape& s) { return Layout{s.batch, s.channels, s.spatial}; }

// Threads over channels: only on the fast path, for a large enough tensor, and never
// nested inside an enclosing parallel region (the caller's threads are already busy).
inline bool parallel_channels(const BatchNormShape& s, Impl impl) {
  return impl == Impl::fast && s.batch * s.channels * s.spatial >= kParallelMin && !omp_in_parallel();
}

}  // namespace codistill::kernels::cpu::batchnorm_layout
