#include "kernels/cpu/image/conv2d.hpp"

#include "kernels/cpu/image/nhwc.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"

namespace codistill::kernels::cpu {
namespace {

// Images are grouped so that one GEMM sees at least this many output columns: a 7x7 map
// alone (49 columns) leaves OpenBLAS' kernels mostly idle, a group of 3 such images does not.
// Larger maps go one image per GEMM: grouping costs copies and measured no faster there.
constexpr std::int64_t kTargetColumns = 128;

// Per-thread scratch that survives across calls (OpenMP keeps its pool threads), so the
// training loop does not allocate and page-fault megabytes per step.
template <class T>
T* scratch(int slot, std::size_t n) {
  thread_local std::vector<T> bufs[6];
  if (bufs[slot].size() < n) bufs[slot].resize(n);
  return bufs[slot].data();
}

// The zero-padded image [C, Hp, Wp]. With the padding materialised (a small copy: C*Hp*Wp
// against the C*KH*KW*OH*OW of the im2col matrix) every im2col row is plain strided copies
// with no bounds tests, which is what makes im2col cheap next to its GEMM.
struct Padded {
  std::int64_t Hp, Wp;
  bool needed;
};
Padded padded(const Conv2dShape& s) {
  return {s.height + 2 * s.pad_h, s.width + 2 * s.pad_w, s.pad_h > 0 || s.pad_w > 0};
}

template <class T>
const T* pad_image(const T* x, const Conv2dShape& s, T* buf) {
  const Padded pd = padded(s);
  if (!pd.needed) return x;
  const std::int64_t H = s.height, W = s.width, ph = s.pad_h, pw = s.pad_w;
  for (std::int64_t c = 0; c < s.in_channels; ++c) {
    T* plane = buf + c * pd.Hp * pd.Wp;
    std::fill(plane, plane + ph * pd.Wp, T(0));
    for (std::int64_t h = 0; h < H; ++h) {
      T* row = plane + (h + ph) * pd.Wp;
      std::fill(row, row + pw, T(0));
      std::copy(x + (c * H + h) * W, x + (c * H + h + 1) * W, row + pw);
      std::fill(row + pw + W, row + pd.Wp, T(0));
    }
    std::fill(plane + (H + ph) * pd.Wp, plane + pd.Hp * pd.Wp, T(0));
  }
  return buf;
}

// col[(c,kh,kw), oh*OW+ow] (row stride ld) = xpad[c, oh*sh+kh, ow*sw+kw].
// pad_buf: C*Hp*Wp scratch, used when there is padding.
template <class T>
void im2col(const T* x, const Conv2dShape& s, T* col, std::int64_t ld, T* pad_buf) {
  const Padded pd = padded(s);
  const T* xp = pad_image(x, s, pad_buf);
  const std::int64_t OH = s.out_height(), OW = s.out_width(), sh = s.stride_h, sw = s.stride_w;
  for (std::int64_t c = 0; c < s.in_channels; ++c)
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        T* row = col + ((c * s.kernel_h + kh) * s.kernel_w + kw) * ld;
        const T* src = xp + (c * pd.Hp + kh) * pd.Wp + kw;
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          const T* sr = src + oh * sh * pd.Wp;
          T* d = row + oh * OW;
          if (sw == 1) {
#pragma omp simd
            for (std::int64_t ow = 0; ow < OW; ++ow) d[ow] = sr[ow];
          } else {
            for (std::int64_t ow = 0; ow < OW; ++ow) d[ow] = sr[ow * sw];
          }
        }
      }
}

// The adjoint of im2col: x = sum over every use of each input pixel of its col entries.
// Overwrites the image x [C,H,W]; accumulates in the padded pad_buf when there is padding.
template <class T>
void col2im(const T* col, std::int64_t ld, const Conv2dShape& s, T* x, T* pad_buf) {
  const Padded pd = padded(s);
  T* xp = pd.needed ? pad_buf : x;
  std::fill(xp, xp + s.in_channels * pd.Hp * pd.Wp, T(0));
  const std::int64_t OH = s.out_height(), OW = s.out_width(), sh = s.stride_h, sw = s.stride_w;
  for (std::int64_t c = 0; c < s.in_channels; ++c)
    for (std::int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
        const T* row = col + ((c * s.kernel_h + kh) * s.kernel_w + kw) * ld;
        T* dst = xp + (c * pd.Hp + kh) * pd.Wp + kw;
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          T* dr = dst + oh * sh * pd.Wp;
          const T* sr = row + oh * OW;
          if (sw == 1) {
#pragma omp simd
            for (std::int64_t ow = 0; ow < OW; ++ow) dr[ow] += sr[ow];
          } else {
            for (std::int64_t ow = 0; ow < OW; ++ow) dr[ow * sw] += sr[ow];
          }
        }
      }
  if (!pd.needed) return;
  const std::int64_t H = s.height, W = s.width;
  for (std::int64_t c = 0; c < s.in_channels; ++c)
    for (std::int64_t h = 0; h < H; ++h) {
      const T* src = xp + (c * pd.Hp + h + s.pad_h) * pd.Wp + s.pad_w;
      std::copy(src, src + W, x + (c * H + h) * W);
    }
}

// ---- reference: direct loops, double accumulators ---------------------------------------

template <class T>
void forward_reference(const T* x, const T* w, const T* b, T* y, const Conv2dShape& s) {
  const std::int64_t C = s.in_channels, H = s.height, W = s.width, O = s.out_channels;
  const std::int64_t KH = s.kernel_h, KW = s.kernel_w, OH = s.out_height(), OW = s.out_width();
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? static_cast<double>(b[o]) : 0.0;
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < KH; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
              if (ih < 0 || ih >= H) continue;
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (iw < 0 || iw >= W) continue;
                acc += static_cast<double>(x[((n * C + c) * H + ih) * W + iw]) *
                       static_cast<double>(w[((o * C + c) * KH + kh) * KW + kw]);
              }
            }
          y[((n * O + o) * OH + oh) * OW + ow] = static_cast<T>(acc);
        }
}

template <class T>
void backward_reference(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                        const Conv2dShape& s, bool accumulate) {
  const std::int64_t C = s.in_channels, H = s.height, W = s.width, O = s.out_channels;
  const std::int64_t KH = s.kernel_h, KW = s.kernel_w, OH = s.out_height(), OW = s.out_width();
  std::vector<double> gx(dx ? s.batch * C * H * W : 0, 0.0), gw(O * C * KH * KW, 0.0), gb(O, 0.0);
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < OH; ++oh)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          const double g = dy[((n * O + o) * OH + oh) * OW + ow];
          gb[o] += g;
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < KH; ++kh) {
              const std::int64_t ih = oh * s.stride_h - s.pad_h + kh;
              if (ih < 0 || ih >= H) continue;
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (iw < 0 || iw >= W) continue;
                const std::int64_t xi = ((n * C + c) * H + ih) * W + iw;
                const std::int64_t wi = ((o * C + c) * KH + kh) * KW + kw;
                gw[wi] += g * static_cast<double>(x[xi]);
                if (dx) gx[xi] += g * static_cast<double>(w[wi]);
              }
            }
        }
  for (std::size_t i = 0; i < gx.size(); ++i) dx[i] = static_cast<T>(gx[i]);
  for (std::size_t i = 0; i < gw.size(); ++i)
    dw[i] = static_cast<T>(accumulate ? dw[i] + gw[i] : gw[i]);
  if (db)
    for (std::int64_t o = 0; o < O; ++o) db[o] = static_cast<T>(accumulate ? db[o] + gb[o] : gb[o]);
}

// ---- fast: im2col + GEMM over groups of images --------------------------------------------

struct Plan {
  std::int64_t P, CKK, group, groups;
  int threads;
};

Plan make_plan(const Conv2dShape& s) {
  Plan p{};
  p.P = s.out_height() * s.out_width();
  p.CKK = s.in_channels * s.kernel_h * s.kernel_w;
  const int avail = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Enough images per GEMM for a decent N, but never so many that a thread sits idle.
  const std::int64_t per_thread = std::max<std::int64_t>(1, s.batch / avail);
  p.group = std::clamp<std::int64_t>((kTargetColumns + p.P - 1) / p.P, 1, per_thread);
  p.groups = (s.batch + p.group - 1) / p.group;
  p.threads = static_cast<int>(std::min<std::int64_t>(avail, p.groups));
  return p;
}

template <class T>
void forward_fast(const T* x, const T* w, const T* b, T* y, const Conv2dShape& s) {
  const Plan pl = make_plan(s);
  const Padded pd = padded(s);
  const std::int64_t C = s.in_channels, HW = s.height * s.width, O = s.out_channels;
  const std::int64_t P = pl.P, CKK = pl.CKK;
  // 1x1, stride 1, no padding: the image itself is the im2col matrix.
  const bool direct = s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
                      s.pad_h == 0 && s.pad_w == 0;
#pragma omp parallel num_threads(pl.threads)
  {
    T* col = direct && pl.group == 1 ? nullptr : scratch<T>(0, CKK * P * pl.group);
    T* out = pl.group > 1 ? scratch<T>(1, O * P * pl.group) : nullptr;
    T* pad = pd.needed ? scratch<T>(4, C * pd.Hp * pd.Wp) : nullptr;
#pragma omp for schedule(static)
    for (std::int64_t g = 0; g < pl.groups; ++g) {
      const std::int64_t n0 = g * pl.group, cnt = std::min(pl.group, s.batch - n0), ld = cnt * P;
      if (cnt == 1) {
        // One image: GEMM straight into y, no copies.
        const T* cb = x + n0 * C * HW;
        if (!direct) {
          im2col(cb, s, col, P, pad);
          cb = col;
        }
        T* yb = y + n0 * O * P;
        gemm_serial<T>(false, false, O, P, CKK, T(1), w, CKK, cb, P, T(0), yb, P);
        if (b)
          for (std::int64_t o = 0; o < O; ++o) {
            const T v = b[o];
#pragma omp simd
            for (std::int64_t i = 0; i < P; ++i) yb[o * P + i] += v;
          }
        continue;
      }
      for (std::int64_t i = 0; i < cnt; ++i) im2col(x + (n0 + i) * C * HW, s, col + i * P, ld, pad);
      gemm_serial<T>(false, false, O, ld, CKK, T(1), w, CKK, col, ld, T(0), out, ld);
      // out is [O][cnt*P]; y wants [cnt][O][P].
      for (std::int64_t i = 0; i < cnt; ++i)
        for (std::int64_t o = 0; o < O; ++o) {
          const T v = b ? b[o] : T(0);
          const T* src = out + o * ld + i * P;
          T* dst = y + ((n0 + i) * O + o) * P;
#pragma omp simd
          for (std::int64_t j = 0; j < P; ++j) dst[j] = src[j] + v;
        }
    }
  }
}

template <class T>
void backward_fast(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const Conv2dShape& s,
                   bool accumulate) {
  const Plan pl = make_plan(s);
  const Padded pd = padded(s);
  const std::int64_t C = s.in_channels, HW = s.height * s.width, O = s.out_channels;
  const std::int64_t P = pl.P, CKK = pl.CKK, WN = O * CKK;
  std::vector<T*> parts(static_cast<std::size_t>(pl.threads), nullptr);
  std::vector<double*> bparts(static_cast<std::size_t>(pl.threads), nullptr);
#pragma omp parallel num_threads(pl.threads)
  {
    // One buffer serves as dcol and then as col: with a single [CKK, cnt*P] matrix live
    // at a time, the per-image working set (it, W, the partial dW) stays within L2.
    T* col = scratch<T>(0, CKK * P * pl.group);
    T* dyg = pl.group > 1 ? scratch<T>(2, O * P * pl.group) : nullptr;
    T* part = scratch<T>(3, WN);
    T* pad = pd.needed ? scratch<T>(4, C * pd.Hp * pd.Wp) : nullptr;
    // The bias gradient rides along while each image's dy is in cache (double partials).
    double* bpart = db ? scratch<double>(5, O) : nullptr;
    if (db) std::fill(bpart, bpart + O, 0.0);
    bool first = true;
#pragma omp for schedule(static)
    for (std::int64_t g = 0; g < pl.groups; ++g) {
      const std::int64_t n0 = g * pl.group, cnt = std::min(pl.group, s.batch - n0), ld = cnt * P;
      if (db)
        for (std::int64_t i = 0; i < cnt; ++i)
          for (std::int64_t o = 0; o < O; ++o) {
            const T* plane = dy + ((n0 + i) * O + o) * P;
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (std::int64_t j = 0; j < P; ++j) sum += plane[j];
            bpart[o] += sum;
          }
      // The group's output gradient as one [O, cnt*P] matrix (a view when cnt == 1).
      const T* dyv = dy + n0 * O * P;
      if (cnt > 1) {
        for (std::int64_t i = 0; i < cnt; ++i)
          for (std::int64_t o = 0; o < O; ++o)
            std::copy(dy + ((n0 + i) * O + o) * P, dy + ((n0 + i) * O + o + 1) * P,
                      dyg + o * ld + i * P);
        dyv = dyg;
      }
      if (dx) {
        // dcol = W^T dy, then scattered back onto the images.
        gemm_serial<T>(true, false, CKK, ld, O, T(1), w, CKK, dyv, ld, T(0), col, ld);
        for (std::int64_t i = 0; i < cnt; ++i) col2im(col + i * P, ld, s, dx + (n0 + i) * C * HW, pad);
      }
      for (std::int64_t i = 0; i < cnt; ++i) im2col(x + (n0 + i) * C * HW, s, col + i * P, ld, pad);
      // This thread's weight gradient: part (+)= dy_g * col^T, in image order.
      gemm_serial<T>(false, true, O, CKK, ld, T(1), dyv, ld, col, ld, first ? T(0) : T(1), part,
                     CKK);
      first = false;
    }
    parts[static_cast<std::size_t>(omp_get_thread_num())] = first ? nullptr : part;
    bparts[static_cast<std::size_t>(omp_get_thread_num())] = first ? nullptr : bpart;
#pragma omp barrier
    if (db) {
#pragma omp single nowait
      for (std::int64_t o = 0; o < O; ++o) {
        double v = accumulate ? static_cast<double>(db[o]) : 0.0;
        for (const double* bp : bparts)
          if (bp) v += bp[o];
        db[o] = static_cast<T>(v);
      }
    }
    // Deterministic reduction: every element adds the thread partials in thread order.
    constexpr std::int64_t chunk = 1024;
#pragma omp for schedule(static)
    for (std::int64_t lo = 0; lo < WN; lo += chunk) {
      const std::int64_t hi = std::min(WN, lo + chunk);
      if (!accumulate) std::fill(dw + lo, dw + hi, T(0));
      for (const T* pt : parts) {
        if (!pt) continue;
#pragma omp simd
        for (std::int64_t i = lo; i < hi; ++i) dw[i] += pt[i];
      }
    }
  }
}

}  // namespace


template <class T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const Conv2dShape& s, Impl impl) {
  s.validate();
  if (s.channels_last) {  // computed in NCHW between exact permutations (nhwc.hpp)
    Conv2dShape plain = s;
    plain.channels_last = false;
    const std::int64_t S = s.height * s.width, OS = s.out_height() * s.out_width();
    const std::vector<T> xc = nchw_copy(x, s.batch, s.in_channels, S);
    std::vector<T> yc(static_cast<std::size_t>(s.batch * s.out_channels * OS));
    conv2d_forward(xc.data(), w, b, yc.data(), plain, impl);
    nchw_to_nhwc(yc.data(), y, s.batch, s.out_channels, OS);
    return;
  }
  if (impl == Impl::reference)
    forward_reference(x, w, b, y, s);
  else
    forward_fast(x, w, b, y, s);
}

template <class T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                     const Conv2dShape& s, bool accumulate, Impl impl) {
  s.validate();
  if (s.channels_last) {  // computed in NCHW between exact permutations (nhwc.hpp)
    Conv2dShape plain = s;
    plain.channels_last = false;
    const std::int64_t S = s.height * s.width, OS = s.out_height() * s.out_width();
    const std::vector<T> xc = nchw_copy(x, s.batch, s.in_channels, S);
    const std::vector<T> dyc = nchw_copy(dy, s.batch, s.out_channels, OS);
    std::vector<T> dxc(dx ? static_cast<std::size_t>(s.batch * s.in_channels * S) : 0);
    conv2d_backward(xc.data(), w, dyc.data(), dx ? dxc.data() : nullptr, dw, db, plain, accumulate, impl);
    if (dx) nchw_to_nhwc(dxc.data(), dx, s.batch, s.in_channels, S);
    return;
  }
  if (impl == Impl::reference)
    backward_reference(x, w, dy, dx, dw, db, s, accumulate);
  else
    backward_fast(x, w, dy, dx, dw, db, s, accumulate);
}

#define CODISTILL_CONV(T)                                                                    \
  template void conv2d_forward<T>(const T*, const T*, const T*, T*, const Conv2dShape&,      \
                                  Impl);                                                     \
  template void conv2d_backward<T>(const T*, const T*, const T*, T*, T*, T*,                 \
                                   const Conv2dShape&, bool, Impl);
CODISTILL_CONV(float)
CODISTILL_CONV(double)
#undef CODISTILL_CONV

}  // namespace codistill::kernels::cpu
