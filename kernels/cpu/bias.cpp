#include "kernels/cpu/bias.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.hpp"

namespace codistill::kernels::cpu {
namespace {

// Elementwise work below this many elements stays on one thread (a fork/join costs about
// as much as streaming 16K floats through L1).
constexpr std::int64_t kParallelMin = 1 << 15;
// Column block of bias_grad_rows: the double accumulators of one block stay in L1.
constexpr std::int64_t kColBlock = 512;

void check_sizes(const char* op, std::int64_t a, std::int64_t b, std::int64_t c = 1) {
  if (a < 0 || b < 0 || c < 0)
    throw std::invalid_argument(std::string(op) + ": negative size (" + std::to_string(a) + ", " +
                                std::to_string(b) + ", " + std::to_string(c) + ")");
}

bool go_parallel(std::int64_t work) { return work >= kParallelMin && !omp_in_parallel(); }

}  // namespace

template <class T>
void bias_add_rows(T* y, const T* b, std::int64_t M, std::int64_t N, Impl impl) {
  check_sizes("bias_add_rows", M, N);
  if (impl == Impl::reference) {
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) y[m * N + n] += b[n];
    return;
  }
  const bool par = go_parallel(M * N);
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t m = 0; m < M; ++m) {
    T* row = y + m * N;
#pragma omp simd
    for (std::int64_t n = 0; n < N; ++n) row[n] += b[n];
  }
}

template <class T>
void bias_grad_rows(const T* dy, T* db, std::int64_t M, std::int64_t N, bool accumulate,
                    Impl impl) {
  check_sizes("bias_grad_rows", M, N);
  if (impl == Impl::reference) {
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t m = 0; m < M; ++m) acc += dy[m * N + n];
      db[n] = static_cast<T>(accumulate ? db[n] + acc : acc);
    }
    return;
  }
  // Threads own disjoint column blocks and every column sums its rows in order, so the
  // result never depends on the thread count. Accumulators are double: cheap here
  // (memory bound) and it keeps long batch sums accurate.
  const std::int64_t blocks = (N + kColBlock - 1) / kColBlock;
  const bool par = go_parallel(M * N) && blocks > 1;
  const Isa isa = chosen_isa();  // before the region: it may throw
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t blk = 0; blk < blocks; ++blk)
    bias_grad_rows_cols(dy, db, M, N, blk * kColBlock, std::min(N, (blk + 1) * kColBlock), accumulate, isa);
}

namespace {

// bias_grad_rows_cols's loop, compiled once per ISA below (kernels/cpu/isa.hpp): the
// float -> double conversions and adds run 8 wide with AVX-512 against 2 with the
// baseline's SSE2. Only adds, each column's in row order: every ISA gives the same bits.
template <class T>
inline __attribute__((always_inline)) void col_sums(const T* dy, T* db, std::int64_t M, std::int64_t N,
                                                    std::int64_t n_lo, std::int64_t n_hi, bool accumulate) {
  for (std::int64_t n0 = n_lo; n0 < n_hi; n0 += kColBlock) {
    const std::int64_t len = std::min(kColBlock, n_hi - n0);
    double acc[kColBlock];
    for (std::int64_t j = 0; j < len; ++j) acc[j] = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      const T* row = dy + m * N + n0;
#pragma omp simd
      for (std::int64_t j = 0; j < len; ++j) acc[j] += row[j];
    }
    T* out = db + n0;
    if (accumulate)
      for (std::int64_t j = 0; j < len; ++j) out[j] = static_cast<T>(out[j] + acc[j]);
    else
      for (std::int64_t j = 0; j < len; ++j) out[j] = static_cast<T>(acc[j]);
  }
}
template <class T>
CODISTILL_TARGET_AVX512 void col_sums_avx512(const T* dy, T* db, std::int64_t M, std::int64_t N, std::int64_t lo,
                                             std::int64_t hi, bool acc) {
  col_sums(dy, db, M, N, lo, hi, acc);
}
template <class T>
CODISTILL_TARGET_AVX2 void col_sums_avx2(const T* dy, T* db, std::int64_t M, std::int64_t N, std::int64_t lo,
                                         std::int64_t hi, bool acc) {
  col_sums(dy, db, M, N, lo, hi, acc);
}
template <class T>
void col_sums_baseline(const T* dy, T* db, std::int64_t M, std::int64_t N, std::int64_t lo, std::int64_t hi,
                       bool acc) {
  col_sums(dy, db, M, N, lo, hi, acc);
}

}  // namespace

template <class T>
void bias_grad_rows_cols(const T* dy, T* db, std::int64_t M, std::int64_t N, std::int64_t n_lo, std::int64_t n_hi,
                         bool accumulate, Isa isa) {
  switch (isa) {
    case Isa::avx512: return col_sums_avx512(dy, db, M, N, n_lo, n_hi, accumulate);
    case Isa::avx2: return col_sums_avx2(dy, db, M, N, n_lo, n_hi, accumulate);
    case Isa::baseline: break;
  }
  col_sums_baseline(dy, db, M, N, n_lo, n_hi, accumulate);
}

template <class T>
void bias_add_channels(T* y, const T* b, std::int64_t B, std::int64_t C, std::int64_t S,
                       Impl impl) {
  check_sizes("bias_add_channels", B, C, S);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < B; ++i)
      for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t s = 0; s < S; ++s) y[(i * C + c) * S + s] += b[c];
    return;
  }
  const bool par = go_parallel(B * C * S);
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t p = 0; p < B * C; ++p) {
    const T v = b[p % C];
    T* plane = y + p * S;
#pragma omp simd
    for (std::int64_t s = 0; s < S; ++s) plane[s] += v;
  }
}

template <class T>
void bias_grad_channels(const T* dy, T* db, std::int64_t B, std::int64_t C, std::int64_t S,
                        bool accumulate, Impl impl) {
  check_sizes("bias_grad_channels", B, C, S);
  if (impl == Impl::reference) {
    for (std::int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (std::int64_t i = 0; i < B; ++i)
        for (std::int64_t s = 0; s < S; ++s) acc += dy[(i * C + c) * S + s];
      db[c] = static_cast<T>(accumulate ? db[c] + acc : acc);
    }
    return;
  }
  // One channel per iteration: its sum runs over images in order, each plane reduced by a
  // fixed-width SIMD sum, so the bits do not depend on the thread count.
  const bool par = go_parallel(B * C * S) && C > 1;
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t c = 0; c < C; ++c) {
    double acc = 0;
    for (std::int64_t i = 0; i < B; ++i) {
      const T* plane = dy + (i * C + c) * S;
      double part = 0;
#pragma omp simd reduction(+ : part)
      for (std::int64_t s = 0; s < S; ++s) part += plane[s];
      acc += part;
    }
    db[c] = static_cast<T>(accumulate ? db[c] + acc : acc);
  }
}

#define CODISTILL_BIAS(T)                                                                    \
  template void bias_add_rows<T>(T*, const T*, std::int64_t, std::int64_t, Impl);            \
  template void bias_grad_rows<T>(const T*, T*, std::int64_t, std::int64_t, bool, Impl);     \
  template void bias_grad_rows_cols<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, \
                                       std::int64_t, bool, Isa);                             \
  template void bias_add_channels<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, \
                                     Impl);                                                  \
  template void bias_grad_channels<T>(const T*, T*, std::int64_t, std::int64_t,              \
                                      std::int64_t, bool, Impl);
CODISTILL_BIAS(float)
CODISTILL_BIAS(double)
#undef CODISTILL_BIAS

}  // namespace codistill::kernels::cpu
