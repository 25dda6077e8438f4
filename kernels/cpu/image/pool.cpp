#include "kernels/cpu/image/pool.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/isa.hpp"

namespace codistill::kernels::cpu {
namespace {

// Planes are independent; fork only for enough elements to pay for it.
constexpr std::int64_t kParallelMin = 1 << 14;

bool go_parallel(std::int64_t work) { return work >= kParallelMin && !omp_in_parallel(); }

// Whether v replaces the window's best so far: strictly greater (so the first of equal
// maxima wins), or a NaN over a number (a NaN is the window's maximum, as on cuDNN; the
// first NaN wins).
template <class T>
inline bool beats(T v, T best) {
  return v > best || (v != v && best == best);
}

// Max over one window in row-major order.
template <class T>
inline void window_max(const T* plane, std::int64_t W, std::int64_t h0, std::int64_t w0,
                       std::int64_t K, T& best, std::int32_t& arg) {
  best = plane[h0 * W + w0];
  arg = static_cast<std::int32_t>(h0 * W + w0);
  for (std::int64_t kh = 0; kh < K; ++kh)
    for (std::int64_t kw = 0; kw < K; ++kw) {
      const std::int64_t idx = (h0 + kh) * W + (w0 + kw);
      if (beats(plane[idx], best)) {
        best = plane[idx];
        arg = static_cast<std::int32_t>(idx);
      }
    }
}

// The common 2x2 window (any stride), branch-free over a run of windows so that the
// compiler can vectorize it: window j's top-left input is in[off[j]] and its plane-relative
// index at[j] (tables built once per call, gathers in the vector loop). A run spans
// several planes: fmnist_cnn's output rows are 7 and 14 long, shorter than a vector, so a
// loop along one output row runs mostly in its scalar remainder. Same rule as window_max
// (beats).
template <class T>
inline __attribute__((always_inline)) void windows_2x2(const T* in, const std::int32_t* off, const std::int32_t* at,
                                                       std::int64_t n, std::int64_t W, T* y, std::int32_t* am) {
  const std::int32_t w32 = static_cast<std::int32_t>(W);
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int32_t o = off[j], c = at[j];
    T best = in[o];
    std::int32_t arg = c;
    const T b = in[o + 1];
    const bool tb = beats(b, best);
    arg = tb ? c + 1 : arg;
    best = tb ? b : best;
    const T d = in[o + w32];
    const bool td = beats(d, best);
    arg = td ? c + w32 : arg;
    best = td ? d : best;
    const T e = in[o + w32 + 1];
    const bool te = beats(e, best);
    arg = te ? c + w32 + 1 : arg;
    best = te ? e : best;
    y[j] = best;
    am[j] = arg;
  }
}

// One plane of a 2x2 / stride 2 pooling along its output rows, for rows long enough to fill
// vectors (contiguous loads, no gathers). Same rule as window_max (beats).
template <class T>
inline __attribute__((always_inline)) void rows_2x2(const T* x, T* y, std::int32_t* am, std::int64_t W,
                                                    std::int64_t OH, std::int64_t OW) {
  const std::int32_t w32 = static_cast<std::int32_t>(W);
  for (std::int64_t oh = 0; oh < OH; ++oh) {
    const T* r0 = x + (2 * oh) * W;
    const T* r1 = r0 + W;
    T* yr = y + oh * OW;
    std::int32_t* ar = am + oh * OW;
    const std::int32_t base = static_cast<std::int32_t>(2 * oh * W);
#pragma omp simd
    for (std::int64_t ow = 0; ow < OW; ++ow) {
      const std::int32_t c = base + static_cast<std::int32_t>(2 * ow);
      T best = r0[2 * ow];
      std::int32_t arg = c;
      const T b = r0[2 * ow + 1];
      const bool tb = beats(b, best);
      arg = tb ? c + 1 : arg;
      best = tb ? b : best;
      const T d = r1[2 * ow];
      const bool td = beats(d, best);
      arg = td ? c + w32 : arg;
      best = td ? d : best;
      const T e = r1[2 * ow + 1];
      const bool te = beats(e, best);
      arg = te ? c + w32 + 1 : arg;
      best = te ? e : best;
      yr[ow] = best;
      ar[ow] = arg;
    }
  }
}

// Output rows at least this long run along the rows (rows_2x2); shorter ones through the
// gather tables (windows_2x2). Measured at one thread (the AVX2 copy): 112x112 maps 2.1 ms
// along the rows against 3.5 ms through the tables; 28x28 and 14x14 maps the other way round.
constexpr std::int64_t kRowLoopMin = 32;

// Planes [lo, hi) of a 2x2 pooling: along the rows (stride 2, long rows), or in groups of
// `group` planes through the tables.
template <class T>
inline __attribute__((always_inline)) void planes_2x2(const T* x, T* y, std::int32_t* argmax, const Pool2dShape& s,
                                                      const std::int32_t* off, const std::int32_t* at,
                                                      std::int64_t group, std::int64_t lo, std::int64_t hi) {
  const std::int64_t HW = s.height * s.width, OH = s.out_height(), OW = s.out_width(), OHW = OH * OW;
  if (s.stride == 2 && OW >= kRowLoopMin) {
    for (std::int64_t p = lo; p < hi; ++p) rows_2x2(x + p * HW, y + p * OHW, argmax + p * OHW, s.width, OH, OW);
    return;
  }
  for (std::int64_t p = lo; p < hi; p += group) {
    const std::int64_t n = std::min(group, hi - p) * OHW;
    windows_2x2(x + p * HW, off, at, n, s.width, y + p * OHW, argmax + p * OHW);
  }
}

// The gathers need AVX2 to pay (kernels/cpu/isa.hpp). An AVX-512 machine runs the AVX2 copy
// too: on Zen 4 its 16-lane gathers were slower than two 8-lane ones (fmnist_cnn's pools at
// one thread, best of 200: 28x28 maps 1.27 vs 1.00 ms, 14x14 0.61 vs 0.47 ms; the baseline
// SSE2 copy 1.35 and 0.65 ms, the per-row loop before it 2.3 and 2.7 ms).
template <class T>
CODISTILL_TARGET_AVX2 void planes_2x2_avx2(const T* x, T* y, std::int32_t* am, const Pool2dShape& s,
                                           const std::int32_t* off, const std::int32_t* at, std::int64_t group,
                                           std::int64_t lo, std::int64_t hi) {
  planes_2x2(x, y, am, s, off, at, group, lo, hi);
}
template <class T>
void planes_2x2_isa(Isa isa, const T* x, T* y, std::int32_t* am, const Pool2dShape& s, const std::int32_t* off,
                    const std::int32_t* at, std::int64_t group, std::int64_t lo, std::int64_t hi) {
  if (isa == Isa::baseline) return planes_2x2(x, y, am, s, off, at, group, lo, hi);
  planes_2x2_avx2(x, y, am, s, off, at, group, lo, hi);
}

}  // namespace


template <class T>
void maxpool2d_forward(const T* x, T* y, std::int32_t* argmax, const Pool2dShape& s, Impl impl) {
  s.validate();
  const std::int64_t H = s.height, W = s.width, K = s.kernel, S = s.stride;
  const std::int64_t OH = s.out_height(), OW = s.out_width();
  const std::int64_t planes = s.batch * s.channels;
  if (impl == Impl::reference) {
    for (std::int64_t p = 0; p < planes; ++p)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          T best;
          std::int32_t arg;
          window_max(x + p * H * W, W, oh * S, ow * S, K, best, arg);
          y[(p * OH + oh) * OW + ow] = best;
          argmax[(p * OH + oh) * OW + ow] = arg;
        }
    return;
  }
  const bool par = go_parallel(planes * H * W);
  if (K == 2) {
    // Tables for a group of planes holding at least 256 windows, fewer planes where the
    // group's inputs would pass int32 offsets (validate() keeps one plane within them); none
    // for the row loop.
    const std::int64_t OHW = OH * OW;
    const bool rows = S == 2 && OW >= kRowLoopMin;
    const std::int64_t max32 = std::numeric_limits<std::int32_t>::max();
    const std::int64_t group =
        rows ? 0 : std::max<std::int64_t>(1, std::min({planes, (256 + OHW - 1) / OHW, max32 / (H * W)}));
    std::vector<std::int32_t> off(static_cast<std::size_t>(group * OHW)), at(off.size());
    for (std::int64_t g = 0; g < group; ++g)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          const auto j = static_cast<std::size_t>((g * OH + oh) * OW + ow);
          at[j] = static_cast<std::int32_t>(oh * S * W + ow * S);
          off[j] = static_cast<std::int32_t>(g * H * W) + at[j];
        }
    const Isa isa = chosen_isa();  // before the region: it may throw
#pragma omp parallel if (par)
    {
      const std::int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
      planes_2x2_isa(isa, x, y, argmax, s, off.data(), at.data(), group, planes * t / n, planes * (t + 1) / n);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * H * W;
    T* yp = y + p * OH * OW;
    std::int32_t* ap = argmax + p * OH * OW;
    for (std::int64_t oh = 0; oh < OH; ++oh)
      for (std::int64_t ow = 0; ow < OW; ++ow)
        window_max(xp, W, oh * S, ow * S, K, yp[oh * OW + ow], ap[oh * OW + ow]);
  }
}

template <class T>
void maxpool2d_backward(const T* dy, const std::int32_t* argmax, T* dx, const Pool2dShape& s,
                        Impl impl) {
  s.validate();
  const std::int64_t HW = s.height * s.width, OHW = s.out_height() * s.out_width();
  const std::int64_t planes = s.batch * s.channels;
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < planes * HW; ++i) dx[i] = T(0);
    for (std::int64_t p = 0; p < planes; ++p)
      for (std::int64_t o = 0; o < OHW; ++o) {
        const std::int32_t a = argmax[p * OHW + o];
        if (a < 0 || a >= HW)
          throw std::invalid_argument("maxpool2d_backward: argmax " + std::to_string(a) +
                                      " outside its plane of " + std::to_string(HW));
        dx[p * HW + a] += dy[p * OHW + o];
      }
    return;
  }
  // A plane's gradient is built by one thread, in output order: overlapping windows
  // (stride < kernel) add in a fixed order, so the result is deterministic. Zeroing the
  // plane and scattering dy measured 2.5x faster than writing each element once with
  // selects (the vector zero fill is cheap; per-element selects are store-bound).
  const bool par = go_parallel(planes * HW);
#pragma omp parallel for schedule(static) if (parallel : par)
  for (std::int64_t p = 0; p < planes; ++p) {
    T* dxp = dx + p * HW;
    const T* dyp = dy + p * OHW;
    const std::int32_t* ap = argmax + p * OHW;
#pragma omp simd
    for (std::int64_t i = 0; i < HW; ++i) dxp[i] = T(0);
    for (std::int64_t o = 0; o < OHW; ++o) dxp[ap[o]] += dyp[o];
  }
}

#define CODISTILL_POOL(T)                                                                    \
  template void maxpool2d_forward<T>(const T*, T*, std::int32_t*, const Pool2dShape&, Impl); \
  template void maxpool2d_backward<T>(const T*, const std::int32_t*, T*, const Pool2dShape&, \
                                      Impl);
CODISTILL_POOL(float)
CODISTILL_POOL(double)
#undef CODISTILL_POOL

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& argmax, const Pool2dShape& s, Queue& q) {
  run_op(*this, Op::maxpool2d, x.dtype(), "maxpool2d", [&]<class T>() {
    if (!argmax.defined() || argmax.dtype() != DType::i32 || argmax.shape() != y.shape() || !argmax.device().is_cpu())
      argmax = Tensor::empty(y.shape(), DType::i32);
    cpu::maxpool2d_forward<T>(x.data<T>(), y.data<T>(), argmax.data<std::int32_t>(), s, impl_of(q));
  });
}

void CpuBackend::maxpool2d_backward(const Tensor& /*x*/, const Tensor& /*y*/, const Tensor& argmax, const Tensor& dy,
                                    Tensor& dx, const Pool2dShape& s, Queue& q) {
  run_op(*this, Op::maxpool2d, dy.dtype(), "maxpool2d backward", [&]<class T>() {
    if (argmax.dtype() != DType::i32 || argmax.numel() != dy.numel())
      throw std::logic_error("maxpool2d backward: no argmax of the matching forward");
    cpu::maxpool2d_backward<T>(dy.data<T>(), argmax.data<std::int32_t>(), dx.data<T>(), s, impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
