#include "kernels/cpu/optimizer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

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
template <class T>
struct Sgd {
  T *p, *buf;
  const T* g;
  T lr, wd, mu;
  bool nesterov;
};

template <class T>
struct AdamW {
  T *p, *m, *v;
  const T* g;
  T decay, b1, b2, step_size, inv_sqrt_bc2, eps;
};

// The three SGD variants are separate loops so that each vectorizes without a branch.
template <class T>
CODISTILL_OPT_INLINE void span(const Sgd<T>& a, std::int64_t lo, std::int64_t hi) {
  T* p = a.p;
  T* buf = a.buf;
  const T* g = a.g;
  const T lr = a.lr, wd = a.wd, mu = a.mu;
  if (!buf) {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (a.nesterov) {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) {
      const T d = g[i] + wd * p[i];
      const T b = mu * buf[i] + d;
      buf[i] = b;
      p[i] -= lr * (d + mu * b);
    }
  } else {
#pragma omp simd
    for (std::int64_t i = lo; i < hi; ++i) {
      const T d = g[i] + wd * p[i];
      const T b = mu * buf[i] + d;
      buf[i] = b;
      p[i] -= lr * b;
    }
  }
}

template <class T>
CODISTILL_OPT_INLINE void span(const AdamW<T>& a, std::int64_t lo, std::int64_t hi) {
  T *p = a.p, *m = a.m, *v = a.v;
  const T* g = a.g;
  const T b1 = a.b1, b2 = a.b2, decay = a.decay, step_size = a.step_size, inv_sqrt_bc2 = a.inv_sqrt_bc2,
          eps = a.eps;
#pragma omp simd
  for (std::int64_t i = lo; i < hi; ++i) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// The one non-inlined function per ISA around the loops.
template <class A>
CODISTILL_TARGET_AVX512 void span_avx512(const A& a, std::int64_t lo, std::int64_t hi) {
  span(a, lo, hi);
}
template <class A>
CODISTILL_TARGET_AVX2 void span_avx2(const A& a, std::int64_t lo, std::int64_t hi) {
  span(a, lo, hi);
}
template <class A>
void span_baseline(const A& a, std::int64_t lo, std::int64_t hi) {
  span(a, lo, hi);
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
void sgd_update(T* p, const T* g, T* momentum, std::int64_t n, const SgdScalars& s, Impl impl) {
  if (s.momentum != 0 && !momentum) throw std::invalid_argument("sgd_update: momentum > 0 needs a momentum slot");
  const Sgd<T> a{p, s.momentum != 0 ? momentum : nullptr, g, static_cast<T>(s.lr), static_cast<T>(s.weight_decay),
                 static_cast<T>(s.momentum), s.nesterov};
  update(a, n, impl);
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWScalars& s, Impl impl) {
  const AdamW<T> a{p, m, v, g, static_cast<T>(s.decay), static_cast<T>(s.beta1), static_cast<T>(s.beta2),
                   static_cast<T>(s.step_size), static_cast<T>(s.inv_sqrt_bc2), static_cast<T>(s.eps)};
  update(a, n, impl);
}

template void sgd_update<float>(float*, const float*, float*, std::int64_t, const SgdScalars&, Impl);
template void sgd_update<double>(double*, const double*, double*, std::int64_t, const SgdScalars&, Impl);
template void adamw_update<float>(float*, const float*, float*, float*, std::int64_t, const AdamWScalars&, Impl);
template void adamw_update<double>(double*, const double*, double*, double*, std::int64_t, const AdamWScalars&,
                                   Impl);

}  // namespace codistill::kernels::cpu
