#include "kernels/cpu/optimizer.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/isa.hpp"

#define CODISTILL_OPT_INLINE inline __attribute__((always_inline))

namespace codistill::kernels::cpu {

namespace {

// Below this many elements one thread updates everything: spawning the team costs more
// than the loop.
constexpr std::int64_t kParallelMin = 1 << 15;

// The update loops are memory bound (SGD with momentum streams five arrays of the arena),
// and the build targets baseline x86-64: compiled for SSE2 only, SGD over fmnist_mlp's
// 269k parameters took 42 us at two threads in a stand-alone loop (27-34 us in the
// trainer's step), 19-24 us with AVX-512 (19-22 in the step). So each loop is
// compiled once per ISA (kernels/cpu/isa.hpp) and picked at run time. This file is built
// with -ffp-contract=off (kernels/CMakeLists.txt): no copy fuses a multiply-add, so every
// ISA computes the same bits as the baseline loop.
//
// p_in, buf_in, m_in, v_in: what the loops read, p, buf, m, v what they write: the same
// arrays in place, the state before the update otherwise (out of place). Element i is read
// before it is written, so one loop serves both with the same bits.
// stream: write with streaming stores (span_streamed).
template <class T>
struct Sgd {
  using value_type = T;
  T *p, *buf;
  const T *p_in, *buf_in, *g;
  T lr, wd, mu;
  bool nesterov;
  T gs;  // grad_scale
  bool stream = false;
};

template <class T>
struct AdamW {
  using value_type = T;
  T *p, *m, *v;
  const T *p_in, *m_in, *v_in, *g;
  T decay, b1, b2, step_size, inv_sqrt_bc2, eps;
  T gs;  // grad_scale
  bool stream = false;
};

// The streamed path's unit: 1 KiB of each written array (16 cache lines) computed into L1
// buffers, then streamed out (one 64-byte line per call costs more in loop overhead than
// the streaming saves).
constexpr std::int64_t kStreamBlockBytes = 1024;
template <class T>
constexpr std::int64_t kStreamBlock = kStreamBlockBytes / static_cast<std::int64_t>(sizeof(T));

// The written arrays (null where unused), and a copy of `a` for the block at element i that
// writes into L1 buffers instead.
template <class T>
CODISTILL_OPT_INLINE std::array<T*, 3> written(const Sgd<T>& a) {
  return {a.p, a.buf, nullptr};
}
template <class T>
CODISTILL_OPT_INLINE std::array<T*, 3> written(const AdamW<T>& a) {
  return {a.p, a.m, a.v};
}
template <class T>
CODISTILL_OPT_INLINE Sgd<T> at_block(const Sgd<T>& a, std::int64_t i, T (*out)[kStreamBlock<T>]) {
  Sgd<T> l = a;
  l.p = out[0];
  l.buf = a.buf ? out[1] : nullptr;
  l.p_in = a.p_in + i;
  l.buf_in = a.buf ? a.buf_in + i : nullptr;
  l.g = a.g + i;
  return l;
}
template <class T>
CODISTILL_OPT_INLINE AdamW<T> at_block(const AdamW<T>& a, std::int64_t i, T (*out)[kStreamBlock<T>]) {
  AdamW<T> l = a;
  l.p = out[0];
  l.m = out[1];
  l.v = out[2];
  l.p_in = a.p_in + i;
  l.m_in = a.m_in + i;
  l.v_in = a.v_in + i;
  l.g = a.g + i;
  return l;
}

// One block from an aligned L1 buffer to memory, past the caches, in the ISA's widest stores
// (SSE2: every x86-64).
struct StreamSse2 {
  static void block(void* dst, const void* src) {
    auto* d = static_cast<__m128i*>(dst);
    const auto* s = static_cast<const __m128i*>(src);
    for (std::int64_t k = 0; k < kStreamBlockBytes / 16; ++k) _mm_stream_si128(d + k, _mm_load_si128(s + k));
  }
};
// Their own target attributes: the narrowest feature each intrinsic needs.
struct StreamAvx2 {
  static __attribute__((target("avx2"))) void block(void* dst, const void* src) {
    auto* d = static_cast<__m256i*>(dst);
    const auto* s = static_cast<const __m256i*>(src);
    for (std::int64_t k = 0; k < kStreamBlockBytes / 32; ++k) _mm256_stream_si256(d + k, _mm256_load_si256(s + k));
  }
};
struct StreamAvx512 {
  static __attribute__((target("avx512f"))) void block(void* dst, const void* src) {
    auto* d = static_cast<__m512i*>(dst);
    const auto* s = static_cast<const __m512i*>(src);
    for (std::int64_t k = 0; k < kStreamBlockBytes / 64; ++k) _mm512_stream_si512(d + k, _mm512_load_si512(s + k));
  }
};

// The three SGD variants are separate loops so that each vectorizes without a branch.
template <class T>
CODISTILL_OPT_INLINE void span(const Sgd<T>& a, std::int64_t lo, std::int64_t hi) {
  T* p = a.p;
  T* buf = a.buf;
  const T *p_in = a.p_in, *buf_in = a.buf_in, *g = a.g;
  const T lr = a.lr, wd = a.wd, mu = a.mu, gs = a.gs;
  if (!buf) {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) {
      const T pi = p_in[i];
      p[i] = pi - lr * (g[i] * gs + wd * pi);
    }
  } else if (a.nesterov) {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) {
      const T pi = p_in[i];
      const T d = g[i] * gs + wd * pi;
      const T b = mu * buf_in[i] + d;
      buf[i] = b;
      p[i] = pi - lr * (d + mu * b);
    }
  } else {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) {
      const T pi = p_in[i];
      const T d = g[i] * gs + wd * pi;
      const T b = mu * buf_in[i] + d;
      buf[i] = b;
      p[i] = pi - lr * b;
    }
  }
}

template <class T>
CODISTILL_OPT_INLINE void span(const AdamW<T>& a, std::int64_t lo, std::int64_t hi) {
  T *p = a.p, *m = a.m, *v = a.v;
  const T *p_in = a.p_in, *m_in = a.m_in, *v_in = a.v_in, *g = a.g;
  const T b1 = a.b1, b2 = a.b2, decay = a.decay, step_size = a.step_size, inv_sqrt_bc2 = a.inv_sqrt_bc2,
          eps = a.eps, gs = a.gs;
#pragma omp simd
  for (std::int64_t i = lo; i < hi; ++i) {
    const T gi = g[i] * gs;
    const T mi = b1 * m_in[i] + (T(1) - b1) * gi;
    const T vi = b2 * v_in[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p_in[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// Out of place, nothing reads the written arrays before the update writes them: ordinary
// stores would first read each of their lines into the cache (read for ownership), about 40%
// more memory traffic than the update in place (SGD with momentum: 28 bytes per element
// against 20). Streaming stores write the lines without reading them. 100M parameters with
// momentum, 2 threads, on the 2026-11 Intel host: 51-52 ms out of place against 45-47 in
// place (bench/bench_optimizer_update, bench/results/optimizer_update_s19.txt); while this
// was written (timings not kept in a raw file), ordinary stores took 85-88 ms against 50-56
// in place, and 16-byte streaming stores 61-67. Only for arrays past the caches (a small
// model's next step would read them back from memory): kStreamMinBytes per array.
//
// span_streamed: each whole block of the written arrays is computed into L1 buffers by span
// (the same arithmetic, so the same bits) and streamed out; the elements before the first
// cache-line boundary and after the last whole block are written as usual. Where the
// written arrays are not aligned alike, everything is.
template <class S, class A>
CODISTILL_OPT_INLINE void span_streamed(const A& a, std::int64_t lo, std::int64_t hi) {
  using T = typename A::value_type;
  constexpr std::int64_t B = kStreamBlock<T>;
  const std::array<T*, 3> dst = written(a);
  auto aligned = [](const T* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; };
  std::int64_t first = lo;
  while (first < hi && !aligned(dst[0] + first)) ++first;
  for (T* d : dst)
    if (d && !aligned(d + first)) return span(a, lo, hi);
  const std::int64_t end = first + (hi - first) / B * B;
  span(a, lo, first);
  alignas(64) T blocks[3][B];
  for (std::int64_t i = first; i < end; i += B) {
    span(at_block(a, i, blocks), 0, B);
    for (int k = 0; k < 3; ++k)
      if (dst[k]) S::block(dst[k] + i, blocks[k]);
  }
  _mm_sfence();  // the streamed lines are visible before the team's barrier
  span(a, end, hi);
}

template <class S, class A>
CODISTILL_OPT_INLINE void span_any(const A& a, std::int64_t lo, std::int64_t hi) {
  if (a.stream)
    span_streamed<S>(a, lo, hi);
  else
    span(a, lo, hi);
}

// The one non-inlined function per ISA around the loops.
template <class A>
CODISTILL_TARGET_AVX512 void span_avx512(const A& a, std::int64_t lo, std::int64_t hi) {
  span_any<StreamAvx512>(a, lo, hi);
}
template <class A>
CODISTILL_TARGET_AVX2 void span_avx2(const A& a, std::int64_t lo, std::int64_t hi) {
  span_any<StreamAvx2>(a, lo, hi);
}
template <class A>
void span_baseline(const A& a, std::int64_t lo, std::int64_t hi) {
  span_any<StreamSse2>(a, lo, hi);
}

// The update over [0, n): equal blocks of whole cache lines, one per OpenMP thread (or all
// on the calling thread when small or on the reference path).
template <class A>
void update(const A& a, std::int64_t n, Impl impl) {
  using Fn = void (*)(const A&, std::int64_t, std::int64_t);
  Fn fn = span_baseline<A>;
  if (impl == Impl::fast) switch (chosen_isa()) {
      case Isa::avx512: fn = span_avx512<A>; break;
      case Isa::avx2: fn = span_avx2<A>; break;
      case Isa::baseline: break;
    }
  if (impl != Impl::fast || n < kParallelMin || omp_in_parallel()) return fn(a, 0, n);
#pragma omp parallel
  {
    const std::int64_t parts = omp_get_num_threads(), t = omp_get_thread_num(), units = (n + 15) / 16;
    const std::int64_t lo = std::min(n, units * t / parts * 16), hi = std::min(n, units * (t + 1) / parts * 16);
    if (lo < hi) fn(a, lo, hi);
  }
}

}  // namespace

template <class T>
void sgd_update(T* p, const T* g, T* momentum, std::int64_t n, const SgdScalars& s, Impl impl, const T* p_from,
                const T* momentum_from) {
  if (s.momentum != 0 && !momentum) throw std::invalid_argument("sgd_update: momentum > 0 needs a momentum slot");
  T* buf = s.momentum != 0 ? momentum : nullptr;
  Sgd<T> a{p,
           buf,
           p_from ? p_from : p,
           momentum_from && buf ? momentum_from : buf,
           g,
           static_cast<T>(s.lr),
           static_cast<T>(s.weight_decay),
           static_cast<T>(s.momentum),
           s.nesterov,
           static_cast<T>(s.grad_scale)};
  // Streaming stores only where nothing written is also read.
  a.stream = impl == Impl::fast && p_from && (!buf || momentum_from) &&
             static_cast<std::size_t>(n) * sizeof(T) >= kStreamMinBytes;
  update(a, n, impl);
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWScalars& s, Impl impl, const T* p_from,
                  const T* m_from, const T* v_from) {
  AdamW<T> a{p,
             m,
             v,
             p_from ? p_from : p,
             m_from ? m_from : m,
             v_from ? v_from : v,
             g,
             static_cast<T>(s.decay),
             static_cast<T>(s.beta1),
             static_cast<T>(s.beta2),
             static_cast<T>(s.step_size),
             static_cast<T>(s.inv_sqrt_bc2),
             static_cast<T>(s.eps),
             static_cast<T>(s.grad_scale)};
  a.stream = impl == Impl::fast && p_from && m_from && v_from &&
             static_cast<std::size_t>(n) * sizeof(T) >= kStreamMinBytes;
  update(a, n, impl);
}

template <class T>
double sum_squares(const T* x, std::int64_t n, Impl impl) {
  auto part = [x](std::int64_t lo, std::int64_t hi) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return s;
  };
  if (impl != Impl::fast || n < kParallelMin || omp_in_parallel()) {
    if (impl == Impl::fast) return part(0, n);
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return s;
  }
  std::vector<double> parts(static_cast<std::size_t>(omp_get_max_threads()), 0.0);
#pragma omp parallel
  {
    const std::int64_t k = omp_get_num_threads(), t = omp_get_thread_num();
    parts[static_cast<std::size_t>(t)] = part(n * t / k, n * (t + 1) / k);
  }
  double s = 0;
  for (double p : parts) s += p;
  return s;
}

template double sum_squares<float>(const float*, std::int64_t, Impl);
template double sum_squares<double>(const double*, std::int64_t, Impl);

template void sgd_update<float>(float*, const float*, float*, std::int64_t, const SgdScalars&, Impl, const float*,
                                const float*);
template void sgd_update<double>(double*, const double*, double*, std::int64_t, const SgdScalars&, Impl,
                                 const double*, const double*);
template void adamw_update<float>(float*, const float*, float*, float*, std::int64_t, const AdamWScalars&, Impl,
                                  const float*, const float*, const float*);
template void adamw_update<double>(double*, const double*, double*, double*, std::int64_t, const AdamWScalars&,
                                   Impl, const double*, const double*, const double*);

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum, const SgdScalars& s,
                            const UpdateSource& from, Queue& q) {
  run_op(*this, Op::sgd_update, value.dtype(), "sgd_update", [&]<class T>() {
    check_update_source(from, value, momentum, nullptr, "sgd_update");
    cpu::sgd_update<T>(value.data<T>(), grad.data<T>(), opt<T>(momentum), value.numel(), s, impl_of(q),
                       opt<T>(from.value), opt<T>(from.m));
  });
}

double CpuBackend::sum_squares(const Tensor& x, Queue& q) {
  double s = 0;
  run_op(*this, Op::sum_squares, x.dtype(), "sum_squares",
         [&]<class T>() { s = cpu::sum_squares<T>(x.data<T>(), x.numel(), impl_of(q)); });
  return s;
}

void CpuBackend::adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s,
                              const UpdateSource& from, Queue& q) {
  run_op(*this, Op::adamw_update, value.dtype(), "adamw_update", [&]<class T>() {
    check_update_source(from, value, &m, &v, "adamw_update");
    cpu::adamw_update<T>(value.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), value.numel(), s, impl_of(q),
                         opt<T>(from.value), opt<T>(from.m), opt<T>(from.v));
  });
}

}  // namespace codistill::kernels::cpu
