#include "kernels/cpu/sequence/embedding.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {
namespace {

constexpr std::int64_t kParallelMin = 1 << 14;  // elements below which threads cost more

}  // namespace

template <class T>
void embedding_forward(const std::int32_t* ids, const T* table, T* y, const EmbeddingShape& s, Impl impl) {
  s.validate();
  check_embedding_ids(ids, s, "cpu");
  const std::int64_t N = s.rows, D = s.dim;
  if (impl == Impl::reference) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t d = 0; d < D; ++d) y[n * D + d] = table[static_cast<std::int64_t>(ids[n]) * D + d];
    return;
  }
  const bool par = N * D >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t n = 0; n < N; ++n)
    std::memcpy(y + n * D, table + static_cast<std::int64_t>(ids[n]) * D, sizeof(T) * static_cast<std::size_t>(D));
}

template <class T>
void embedding_backward(const std::int32_t* ids, const T* dy, T* dtable, const EmbeddingShape& s, Impl impl) {
  s.validate();
  check_embedding_ids(ids, s, "cpu");
  const std::int64_t N = s.rows, D = s.dim;
  if (impl == Impl::reference) {
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t d = 0; d < D; ++d) dtable[static_cast<std::int64_t>(ids[n]) * D + d] += dy[n * D + d];
    return;
  }
  // Each thread owns a band of columns and adds the rows in order: no two threads touch
  // one element, and every element sees its additions in row order (as the reference).
  const bool par = N * D >= kParallelMin && !omp_in_parallel();
#pragma omp parallel if (par)
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t band = (D + threads - 1) / threads;
    const std::int64_t lo = std::min(D, t * band), hi = std::min(D, lo + band);
    for (std::int64_t n = 0; n < N; ++n) {
      T* dst = dtable + static_cast<std::int64_t>(ids[n]) * D;
      const T* src = dy + n * D;
#pragma omp simd
      for (std::int64_t d = lo; d < hi; ++d) dst[d] += src[d];
    }
  }
}

#define CODISTILL_EMBEDDING(T)                                                                                 \
  template void embedding_forward<T>(const std::int32_t*, const T*, T*, const EmbeddingShape&, Impl);          \
  template void embedding_backward<T>(const std::int32_t*, const T*, T*, const EmbeddingShape&, Impl);
CODISTILL_EMBEDDING(float)
CODISTILL_EMBEDDING(double)
#undef CODISTILL_EMBEDDING

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

namespace {

// A bf16 table (Op::embedding_bf16_table: a forward-only model's matrices held as bf16):
// each row gathered and widened to float32, which is exact, so both paths give the same bits.
void embedding_forward_bf16(const Backend& be, const Tensor& ids, const Tensor& table, Tensor& y,
                            const EmbeddingShape& s) {
  require_support(be, Op::embedding_bf16_table, y.dtype(), "embedding");
  check_ids(ids, s, "embedding");
  s.validate();
  const std::int32_t* id = ids.data<std::int32_t>();
  check_embedding_ids(id, s, "cpu");
  const auto* tab = static_cast<const std::uint16_t*>(table.raw());
  float* out = y.data<float>();
  const std::int64_t N = s.rows, D = s.dim;
  const bool par = N * D >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t n = 0; n < N; ++n) {
    const std::uint16_t* row = tab + static_cast<std::int64_t>(id[n]) * D;
    for (std::int64_t d = 0; d < D; ++d) out[n * D + d] = bf16_to_float(row[d]);
  }
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                                   Queue& q) {
  if (table.dtype() == DType::bf16) return embedding_forward_bf16(*this, ids, table, y, s);
  run_op(*this, Op::embedding, table.dtype(), "embedding", [&]<class T>() {
    check_ids(ids, s, "embedding");
    cpu::embedding_forward<T>(ids.data<std::int32_t>(), table.data<T>(), y.data<T>(), s, impl_of(q));
  });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                                    Queue& q) {
  run_op(*this, Op::embedding, dy.dtype(), "embedding backward", [&]<class T>() {
    check_ids(ids, s, "embedding backward");
    cpu::embedding_backward<T>(ids.data<std::int32_t>(), dy.data<T>(), dtable.data<T>(), s, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
