#include "kernels/cpu/activation.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {
namespace {

// ReLU streams memory: below 32K elements one thread is faster than a fork/join.
constexpr std::int64_t kParallelMinCheap = 1 << 15;
// GELU costs tens of flops an element: about 0.6 ns vectorized (float), 20 ns via libm
// (double), so threads pay off much earlier than for ReLU, and earlier still for double.
template <class T>
constexpr std::int64_t kParallelMinGelu = sizeof(T) == 4 ? 1 << 14 : 1 << 11;

void check_n(const char* op, std::int64_t n) {
  if (n < 0) throw std::invalid_argument(std::string(op) + ": negative size " + std::to_string(n));
}

bool go_parallel(std::int64_t n, std::int64_t min) { return n >= min && !omp_in_parallel(); }

// Exact GELU and its derivative. Phi(x) = (1 + erf(x/sqrt2))/2 is computed as
// erfc(-x/sqrt2)/2: the same function without the cancellation of 1 + erf(.) for negative
// x, which in float would lose most digits of a tiny output.
// double: libm, exact to the last bits.
inline double gelu_value(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }
inline double gelu_slope(double x) {
  const double cdf = 0.5 * std::erfc(-x * 0.70710678118654752440);
  return cdf + x * 0.39894228040143267794 * std::exp(-0.5 * x * x);
}

// float: libm's erfcf/expf are scalar calls that stop the loop from vectorizing (about
// 10 ns an element), so float gets branch-free approximations of its own, accurate to
// about 1e-6 relative (tested against the double reference):
//   exp(v), v in [-87, 0]: v = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial
//     fitted for this project, 2^n assembled in the exponent bits;
//   erfc(u), u = |x|/sqrt2 in [0, 9.3]: exp(-u^2) * Q(t), t = 1 / (1 + u/2), Q a degree-8
//     polynomial fitted (least squares, relative error) to erfc(u) exp(u^2).
inline float exp_nonpositive(float v) {
  const float n = (v * 1.44269504f + 12582912.f) - 12582912.f;  // round to nearest integer
  const float r = (v - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 split hi + lo
  float q = 1.37514074e-3f;
  q = q * r + 8.36891588e-3f;
  q = q * r + 4.16695327e-2f;
  q = q * r + 1.66665182e-1f;
  q = q * r + 4.99999881e-1f;
  const float e = 1.f + r + r * r * q;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // 2^n, n >= -126
  return e * std::bit_cast<float>(bits);
}

// Phi(x) and exp(-x^2/2).
inline void normal_cdf_gauss(float x, float& cdf, float& gauss) {
  // u = min(|x|/sqrt2, 9.3): beyond, Phi is 0 or 1 to float precision. Clamped on the bit
  // pattern (for u >= 0 integer order is float order; NaN clamps too, x still carries it
  // into the result): a float min is a branch to GCC, which it then specialises for the
  // constant 9.3 into a path it cannot if-convert, and the loop would not vectorize.
  const std::int32_t ubits = std::bit_cast<std::int32_t>(std::fabs(x) * 0.70710678f);
  const float u = std::bit_cast<float>(std::min(ubits, std::bit_cast<std::int32_t>(9.3f)));
  const float t = 1.f / (1.f + 0.5f * u);
  float q = -1.14784986e-2f;
  q = q * t + 1.49526373e-1f;
  q = q * t - 4.90857869e-1f;
  q = q * t + 5.46208620e-1f;
  q = q * t - 6.95291087e-2f;
  q = q * t + 3.25410664e-1f;
  q = q * t + 2.67135084e-1f;
  q = q * t + 2.83653080e-1f;
  q = q * t - 6.81349120e-5f;
  gauss = exp_nonpositive(-u * u);
  // cdf = x < 0 ? lower : 1 - lower, written with selects of constants only: GCC (under
  // -ftrapping-math) sinks `1 - lower` into a branch it will not if-convert, and that
  // branch would stop the loop from vectorizing. Both forms round identically.
  const float lower = 0.5f * q * gauss;  // Phi(-|x|)
  const float base = x < 0.f ? 0.f : 1.f;
  const float sign = x < 0.f ? 1.f : -1.f;
  cdf = base + sign * lower;
}
inline float gelu_value(float x) {
  float cdf, gauss;
  normal_cdf_gauss(x, cdf, gauss);
  return x * cdf;
}
inline float gelu_slope(float x) {
  float cdf, gauss;
  normal_cdf_gauss(x, cdf, gauss);
  return cdf + x * 0.398942280f * gauss;
}

// sigmoid(x) from e = exp(-|x|) in (0, 1], which cannot overflow: 1 / (1 + e) for x >= 0,
// e / (1 + e) below (1 - 1/(1 + e) would cancel away the digits of a small output). Past
// |x| = 87, where exp_nonpositive stops, it is 0 or 1 (float32 holds no 1 - 2^-126), so
// silu(-inf) = -inf * 0 is NaN as in the reference; NaN stays NaN through silu's x.
// Clamped on the bit pattern, selects only: as normal_cdf_gauss, for the loop to vectorize.
inline float sigmoid_value(float x) {
  const std::int32_t abits = std::bit_cast<std::int32_t>(std::fabs(x));
  const std::int32_t limit = std::bit_cast<std::int32_t>(87.f);
  const float e = exp_nonpositive(-std::bit_cast<float>(std::min(abits, limit)));
  const float r = 1.f / (1.f + e);
  const float s = x < 0.f ? e * r : r;
  const float tail = x < 0.f ? 0.f : 1.f;
  return abits > limit ? tail : s;
}
// double: libm. 1 / (1 + exp(-x)) overflows to 1 / inf = 0 for x < -709: the right limit.
inline double sigmoid_value(double x) { return 1.0 / (1.0 + std::exp(-x)); }

template <class T>
inline T silu_value(T x) {
  return x * sigmoid_value(x);
}
template <class T>
inline T silu_slope(T x) {
  const T s = sigmoid_value(x);
  return s * (T(1) + x * (T(1) - s));
}

// GELU's tanh form through the sigmoid: 1 + tanh(u) = 2 sigmoid(2u), so y = x sigmoid(2u)
// (no tanh to vectorize, and sigmoid_value's range care). 2u saturates the sigmoid long
// before x^3 overflows.
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;
template <class T>
inline T gelu_tanh_value(T x) {
  const T two_u = T(2 * kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return x * sigmoid_value(two_u);
}
template <class T>
inline T gelu_tanh_slope(T x) {
  const T x2 = x * x;
  const T s = sigmoid_value(T(2 * kSqrt2OverPi) * (x + T(kGeluCubic) * x2 * x));
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x2);
  return s + T(2) * x * s * (T(1) - s) * du;
}

// The GELU loops over one thread's span. The build targets baseline x86-64 (SSE2), so the
// float loops also get AVX2+FMA and AVX-512 copies, chosen once at load time by the CPU.
// Where the compiler fuses multiply-adds the copies round differently: results are
// reproducible on one machine, not necessarily bit-identical across CPU generations.
// CODISTILL_NO_MULTIVERSIONING (set by the ThreadSanitizer build): the clones' ifunc
// resolvers run before the sanitizer's runtime is up and crash the process before main.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(CODISTILL_NO_MULTIVERSIONING)
#define CODISTILL_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CODISTILL_SIMD_CLONES
#endif

CODISTILL_SIMD_CLONES void gelu_forward_span(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_value(x[i]);
}
CODISTILL_SIMD_CLONES void gelu_backward_span(const float* x, const float* dy, float* dx,
                                              std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = g * gelu_slope(x[i]);
  }
}
CODISTILL_SIMD_CLONES void silu_forward_span(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = silu_value(x[i]);
}
CODISTILL_SIMD_CLONES void silu_backward_span(const float* x, const float* dy, float* dx,
                                              std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = g * silu_slope(x[i]);
  }
}
CODISTILL_SIMD_CLONES void gelu_tanh_forward_span(const float* x, float* y, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_value(x[i]);
}
CODISTILL_SIMD_CLONES void gelu_tanh_backward_span(const float* x, const float* dy, float* dx, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = g * gelu_tanh_slope(x[i]);
  }
}
// double: the tanh form itself (libm's tanh, as the reference): the sigmoid form's slope,
// s + 2 x s (1 - s) u', cancels near GELU's minimum (x ~ -0.75) to 1e-13 off in double.
double gelu_tanh_exact(double v) { return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v))); }
double gelu_tanh_exact_slope(double v) {
  const double t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
  const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * v * v);
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
}
void gelu_tanh_forward_span(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_exact(x[i]);
}
void gelu_tanh_backward_span(const double* x, const double* dy, double* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_tanh_exact_slope(x[i]);
}
void silu_forward_span(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = silu_value(x[i]);
}
void silu_backward_span(const double* x, const double* dy, double* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * silu_slope(x[i]);
}
void gelu_forward_span(const double* x, double* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_value(x[i]);
}
void gelu_backward_span(const double* x, const double* dy, double* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_slope(x[i]);
}

// Runs body(lo, hi) over [0, n) split in equal static blocks (multiples of 16 elements),
// one per OpenMP thread, or on the calling thread alone for small n.
template <class Body>
void split_static(std::int64_t n, std::int64_t min_parallel, Body&& body) {
  if (!go_parallel(n, min_parallel)) {
    body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t units = (n + 15) / 16;
    const std::int64_t lo = std::min(n, units * t / parts * 16);
    const std::int64_t hi = std::min(n, units * (t + 1) / parts * 16);
    if (lo < hi) body(lo, hi);
  }
}

}  // namespace

// The loops below are elementwise and allow y == x (dx == dy): each output depends only on
// the same index of its inputs, so the in-place case is safe with or without SIMD.

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, Impl impl) {
  check_n("relu_forward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
    return;
  }
  // The condition is evaluated once and bound to `parallel` only: an unmodified `if`
  // on `parallel for simd` also governs `simd` (OpenMP 5.0), GCC re-tests it inside the
  // region, where omp_in_parallel() is true, and falls back to a scalar loop (4x slower).
  const bool par = go_parallel(n, kParallelMinCheap);
#pragma omp parallel for simd schedule(static) if (parallel : par)
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <class T>
void relu_backward(const T* y, const T* dy, T* dx, std::int64_t n, Impl impl) {
  check_n("relu_backward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
    return;
  }
  split_static(n, kParallelMinCheap,
               [&](std::int64_t lo, std::int64_t hi) { relu_backward_span(y + lo, dy + lo, dx + lo, hi - lo); });
}

template <class T>
void relu_backward_span(const T* y, const T* dy, T* dx, std::int64_t n) {
  // dy[i] is loaded unconditionally: written as `y > 0 ? dy : 0` the load is conditional,
  // GCC cannot if-convert it without masked loads, and the loop becomes a mispredicted
  // branch per element (5x slower on random signs).
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = dy[i];
    dx[i] = y[i] > T(0) ? g : T(0);
  }
}

template <class T>
void gelu_forward(const T* x, T* y, std::int64_t n, Impl impl) {
  check_n("gelu_forward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      y[i] = static_cast<T>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
    }
    return;
  }
  split_static(n, kParallelMinGelu<T>,
               [&](std::int64_t lo, std::int64_t hi) { gelu_forward_span(x + lo, y + lo, hi - lo); });
}

template <class T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl) {
  check_n("gelu_backward", n);
  if (impl == Impl::reference) {
    const double pi = 3.14159265358979323846;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
      const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * pi);
      dx[i] = static_cast<T>(static_cast<double>(dy[i]) * (cdf + v * pdf));
    }
    return;
  }
  split_static(n, kParallelMinGelu<T>, [&](std::int64_t lo, std::int64_t hi) {
    gelu_backward_span(x + lo, dy + lo, dx + lo, hi - lo);
  });
}

// SiLU: the reference in double, s = 1 / (1 + exp(-v)) (0 below v = -709: the limit);
// the fast path as GELU's, with sigmoid_value above. A SiLU costs an exponential and a
// division: GELU's thread thresholds.
template <class T>
void silu_forward(const T* x, T* y, std::int64_t n, Impl impl) {
  check_n("silu_forward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      y[i] = static_cast<T>(v / (1.0 + std::exp(-v)));
    }
    return;
  }
  split_static(n, kParallelMinGelu<T>,
               [&](std::int64_t lo, std::int64_t hi) { silu_forward_span(x + lo, y + lo, hi - lo); });
}

template <class T>
void silu_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl) {
  check_n("silu_backward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double s = 1.0 / (1.0 + std::exp(-v));
      dx[i] = static_cast<T>(static_cast<double>(dy[i]) * (s * (1.0 + v * (1.0 - s))));
    }
    return;
  }
  split_static(n, kParallelMinGelu<T>, [&](std::int64_t lo, std::int64_t hi) {
    silu_backward_span(x + lo, dy + lo, dx + lo, hi - lo);
  });
}

// GELU's tanh form: the reference in double with std::tanh, the formula as PyTorch writes it;
// the fast path as SiLU's (one exponential and a division: GELU's thread thresholds).
template <class T>
void gelu_tanh_forward(const T* x, T* y, std::int64_t n, Impl impl) {
  check_n("gelu_tanh_forward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(gelu_tanh_exact(x[i]));
    return;
  }
  split_static(n, kParallelMinGelu<T>,
               [&](std::int64_t lo, std::int64_t hi) { gelu_tanh_forward_span(x + lo, y + lo, hi - lo); });
}

template <class T>
void gelu_tanh_backward(const T* x, const T* dy, T* dx, std::int64_t n, Impl impl) {
  check_n("gelu_tanh_backward", n);
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i)
      dx[i] = static_cast<T>(static_cast<double>(dy[i]) * gelu_tanh_exact_slope(x[i]));
    return;
  }
  split_static(n, kParallelMinGelu<T>, [&](std::int64_t lo, std::int64_t hi) {
    gelu_tanh_backward_span(x + lo, dy + lo, dx + lo, hi - lo);
  });
}

#define CODISTILL_ACT(T)                                                        \
  template void relu_forward<T>(const T*, T*, std::int64_t, Impl);              \
  template void relu_backward<T>(const T*, const T*, T*, std::int64_t, Impl);   \
  template void relu_backward_span<T>(const T*, const T*, T*, std::int64_t);    \
  template void gelu_forward<T>(const T*, T*, std::int64_t, Impl);              \
  template void gelu_backward<T>(const T*, const T*, T*, std::int64_t, Impl);   \
  template void silu_forward<T>(const T*, T*, std::int64_t, Impl);              \
  template void silu_backward<T>(const T*, const T*, T*, std::int64_t, Impl);   \
  template void gelu_tanh_forward<T>(const T*, T*, std::int64_t, Impl);         \
  template void gelu_tanh_backward<T>(const T*, const T*, T*, std::int64_t, Impl);
CODISTILL_ACT(float)
CODISTILL_ACT(double)
#undef CODISTILL_ACT

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::activation_forward(const Tensor& x, Tensor& y, Activation act, Queue& q) {
  run_op(*this, Op::activation, x.dtype(), "activation",
         [&]<class T>() { activate<T>(x.data<T>(), y.data<T>(), x.numel(), act, impl_of(q)); });
}

void CpuBackend::activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx, Activation act, Queue& q) {
  run_op(*this, Op::activation, dy.dtype(), "activation backward", [&]<class T>() {
    activate_backward<T>(saved.data<T>(), dy.data<T>(), dx.data<T>(), dy.numel(), act, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
