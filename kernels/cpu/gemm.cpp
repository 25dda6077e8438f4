#include "kernels/cpu/gemm.hpp"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>

// OpenBLAS's own setter, declared here as impl.cpp does, so any cblas.h variant works.
extern "C" void openblas_set_num_threads(int num_threads);

namespace codistill::kernels::cpu {
namespace {

// Below this many flops per thread, forking costs more than it saves (an OpenMP fork and
// join is a few microseconds; 2e5 flops take about 2 us on one core).
constexpr double kMinFlopsPerThread = 4e5;

// All parallelism is OpenMP's. OpenBLAS is pinned to one thread the first time a fast
// gemm runs, so that a caller who never called set_num_threads does not get OpenBLAS's
// own thread pool fighting ours (or being entered from several OpenMP threads at once).
void pin_openblas_once() {
  static const bool pinned = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)pinned;
}

int to_blas_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " is out of range for OpenBLAS (0 .. 2^31-1)");
  return static_cast<int>(v);
}

// float32 goes to oneDNN's sgemm, not OpenBLAS's: Debian 12's OpenBLAS (0.3.21) predates its
// Zen 4 support and runs its AVX2 kernels here, while oneDNN's JIT sgemm uses AVX-512: on
// this machine's GEMMs of one MLP step, one thread, 117 vs 230 GFLOP/s (bench_sgemm has
// both). It runs on the calling thread only: inside our parallel regions oneDNN sees
// omp_in_parallel() and stays serial; outside one, its thread count is the caller's OpenMP
// one, set to 1 for the call (an ICV of the calling thread alone) and restored. float64
// (the gradient checks') stays on OpenBLAS: oneDNN has no dgemm.
void blas_call(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  const bool top = !omp_in_parallel();
  const int threads = top ? omp_get_max_threads() : 1;
  if (top && threads != 1) omp_set_num_threads(1);
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (top && threads != 1) omp_set_num_threads(threads);
  // Sizes and strides were checked by the callers (to_blas_int, the leading dimensions come
  // from them): a failure here is a broken invariant. Thrown where it can be; inside a
  // parallel region an exception must not escape an OpenMP thread, so there it aborts.
  if (st != dnnl_success) {
    if (top)
      throw std::logic_error("gemm: dnnl_sgemm failed (status " + std::to_string(static_cast<int>(st)) +
                             ") on M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    std::abort();
  }
}
void blas_call(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
              N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void check_dims(std::int64_t M, std::int64_t N, std::int64_t K) {
  if (M < 0 || N < 0 || K < 0)
    throw std::invalid_argument("gemm: negative size M=" + std::to_string(M) +
                                " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

// C = beta * C for the degenerate K = 0 case (beta = 0 writes zeros, never reads C).
template <class T>
void scale_c(std::int64_t M, std::int64_t N, T beta, T* C, std::int64_t ldc) {
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) C[m * ldc + n] = beta == T(0) ? T(0) : beta * C[m * ldc + n];
}

template <class T>
void gemm_reference(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
                    const T* A, const T* B, T beta, T* C) {
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * M + m] : A[m * K + k];
        const double b = tb ? B[n * K + k] : B[k * N + n];
        acc += a * b;
      }
      T& c = C[m * N + n];
      c = static_cast<T>(static_cast<double>(alpha) * acc +
                         (beta == T(0) ? 0.0 : static_cast<double>(beta) * c));
    }
  }
}

// Splits [0, len) into `parts` contiguous blocks whose edges are multiples of `align`
// (whole SIMD panels for the libraries' kernels); returns block `part`.
std::pair<std::int64_t, std::int64_t> block(std::int64_t len, int parts, int part,
                                            std::int64_t align) {
  const std::int64_t units = (len + align - 1) / align;
  const std::int64_t lo = std::min(len, units * part / parts * align);
  const std::int64_t hi = std::min(len, units * (part + 1) / parts * align);
  return {lo, hi};
}

template <class T>
void gemm_fast(bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
               const T* A, const T* B, T beta, T* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    scale_c(M, N, beta, C, N);
    return;
  }
  // gemm_split checks the sizes before the parallel region: an exception must not escape
  // an OpenMP thread.
  const GemmSplit s = gemm_split<T>(M, N, K, omp_in_parallel() ? 1 : omp_get_max_threads());
  if (s.parts <= 1) return gemm_part(s, 0, ta, tb, M, N, K, alpha, A, B, beta, C);
  // Each thread owns a block of rows (or columns) of C: no two threads write the same
  // element and each element's sum runs in the library's fixed order, so the result depends
  // only on the thread count.
  // Parts are dealt out by the team's real size: OpenMP may give fewer threads than asked
  // (OMP_DYNAMIC, a thread limit), and every part must still be computed.
#pragma omp parallel num_threads(s.parts)
  for (int p = omp_get_thread_num(); p < s.parts; p += omp_get_num_threads())
    gemm_part(s, p, ta, tb, M, N, K, alpha, A, B, beta, C);
}

}  // namespace

template <class T>
GemmSplit gemm_split(std::int64_t M, std::int64_t N, std::int64_t K, int threads) {
  check_dims(M, N, K);
  for (std::int64_t v : {M, N, K}) to_blas_int(v, "size");  // here, not inside a caller's region
  GemmSplit s;
  s.align = 64 / static_cast<std::int64_t>(sizeof(T));  // one cache line
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const int want = static_cast<int>(std::min<double>(std::max(threads, 1), std::max(1.0, flops / kMinFlopsPerThread)));
  // Parts of whole cache lines along one dimension; the call takes as long as its largest
  // part, so the split is along the dimension whose largest part is smallest (the larger
  // dimension on a tie). fmnist_mlp's 256 x 784 weight gradient: its 784 columns make
  // blocks of 384 and 400 (49 lines), its 256 rows two equal halves.
  auto units = [&](std::int64_t len) { return (len + s.align - 1) / s.align; };
  auto largest = [&](std::int64_t len, std::int64_t other) {
    const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(want, units(len)));
    return std::min(len, (units(len) + parts - 1) / parts * s.align) * other;
  };
  const std::int64_t by_m = largest(M, N), by_n = largest(N, M);
  s.split_m = by_m != by_n ? by_m < by_n : M >= N;
  s.len = s.split_m ? M : N;
  s.parts = std::max(1, static_cast<int>(std::min<std::int64_t>(want, units(s.len))));
  return s;
}

template <class T>
void gemm_part(const GemmSplit& s, int p, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
               const T* A, const T* B, T beta, T* C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (p == 0) scale_c(M, N, beta, C, N);
    return;
  }
  const std::int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  const auto [lo, hi] = block(s.len, s.parts, p, s.align);
  if (lo >= hi) return;
  if (s.split_m)
    gemm_serial(ta, tb, hi - lo, N, K, alpha, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc);
  else
    gemm_serial(ta, tb, M, hi - lo, K, alpha, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
}

template <class T>
void gemm_serial(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                 T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
                 std::int64_t ldc) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  pin_openblas_once();
  blas_call(trans_a, trans_b, to_blas_int(M, "M"), to_blas_int(N, "N"), to_blas_int(K, "K"),
            alpha, A, to_blas_int(lda, "lda"), B, to_blas_int(ldb, "ldb"), beta, C,
            to_blas_int(ldc, "ldc"));
}

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, T alpha,
          const T* A, const T* B, T beta, T* C, Impl impl) {
  check_dims(M, N, K);
  if (impl == Impl::reference)
    gemm_reference(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
  else
    gemm_fast(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

#define CODISTILL_GEMM(T)                                                                    \
  template void gemm<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t, T, const T*,   \
                        const T*, T, T*, Impl);                                              \
  template void gemm_serial<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t, T,      \
                               const T*, std::int64_t, const T*, std::int64_t, T, T*,        \
                               std::int64_t);                                                \
  template GemmSplit gemm_split<T>(std::int64_t, std::int64_t, std::int64_t, int);           \
  template void gemm_part<T>(const GemmSplit&, int, bool, bool, std::int64_t, std::int64_t,  \
                             std::int64_t, T, const T*, const T*, T, T*);
CODISTILL_GEMM(float)
CODISTILL_GEMM(double)
#undef CODISTILL_GEMM

}  // namespace codistill::kernels::cpu
