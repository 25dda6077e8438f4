#include "kernels/cpu/sequence/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/sequence/flash_attention_fast.hpp"

namespace codistill::kernels::cpu {
namespace {

// ---- reference: one row of scores at a time, sums in double ----

template <class T>
void forward_reference(const T* qkv, T* y, T* lse, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  std::vector<double> p(static_cast<std::size_t>(Tn)), acc(static_cast<std::size_t>(hd));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const T* q = qkv + b * Tn * ld + h * hd;
      const T *k = q + D, *v = q + 2 * D;
      for (std::int64_t i = 0; i < Tn; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {  // keys after i are masked: never computed
          double dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) dot += static_cast<double>(q[i * ld + c]) * k[j * ld + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t c = 0; c < hd; ++c) acc[c] += p[j] * v[j * ld + c];
        for (std::int64_t c = 0; c < hd; ++c) y[(b * Tn + i) * D + h * hd + c] = static_cast<T>(acc[c] / sum);
        lse[(b * s.heads + h) * Tn + i] = static_cast<T>(mx + std::log(sum));
      }
    }
}

// dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dy_i with
// P_ij = exp(s_ij - lse_i) and dS_ij = P_ij (dy_i . v_j - dy_i . y_i).
template <class T>
void backward_reference(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  const std::size_t n = static_cast<std::size_t>(Tn * hd);
  std::vector<double> dq(n), dk(n), dv(n);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const T* q = qkv + b * Tn * ld + h * hd;
      const T *k = q + D, *v = q + 2 * D, *yo = y + b * Tn * D + h * hd, *g = dy + b * Tn * D + h * hd;
      std::fill(dq.begin(), dq.end(), 0.0), std::fill(dk.begin(), dk.end(), 0.0), std::fill(dv.begin(), dv.end(), 0.0);
      for (std::int64_t i = 0; i < Tn; ++i) {
        double di = 0;
        for (std::int64_t c = 0; c < hd; ++c) di += static_cast<double>(g[i * D + c]) * yo[i * D + c];
        const double shift = lse[(b * s.heads + h) * Tn + i];
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0, dp = 0;
          for (std::int64_t c = 0; c < hd; ++c) {
            dot += static_cast<double>(q[i * ld + c]) * k[j * ld + c];
            dp += static_cast<double>(g[i * D + c]) * v[j * ld + c];
          }
          const double p = std::exp(dot * scale - shift), ds = p * (dp - di);
          for (std::int64_t c = 0; c < hd; ++c) {
            dv[j * hd + c] += p * g[i * D + c];
            dk[j * hd + c] += scale * ds * q[i * ld + c];
            dq[i * hd + c] += scale * ds * k[j * ld + c];
          }
        }
      }
      T* out = dqkv + b * Tn * ld + h * hd;
      for (std::int64_t i = 0; i < Tn; ++i)
        for (std::int64_t c = 0; c < hd; ++c) {
          out[i * ld + c] = static_cast<T>(dq[i * hd + c]);
          out[i * ld + D + c] = static_cast<T>(dk[i * hd + c]);
          out[i * ld + 2 * D + c] = static_cast<T>(dv[i * hd + c]);
        }
    }
}

}  // namespace

template <class T>
void flash_attention_forward(const T* qkv, T* y, T* lse, const AttentionShape& s, Impl impl) {
  s.validate();
  if (impl == Impl::reference) forward_reference(qkv, y, lse, s);
  else flash::forward_fast(qkv, y, lse, s, chosen_isa());
}

template <class T>
void flash_attention_backward(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s,
                              Impl impl) {
  s.validate();
  if (impl == Impl::reference) backward_reference(qkv, y, lse, dy, dqkv, s);
  else flash::backward_fast(qkv, y, lse, dy, dqkv, s, chosen_isa());
}

#define CODISTILL_FLASH_ATTENTION(T)                                                                  \
  template void flash_attention_forward<T>(const T*, T*, T*, const AttentionShape&, Impl);            \
  template void flash_attention_backward<T>(const T*, const T*, const T*, const T*, T*, const AttentionShape&, \
                                            Impl);
CODISTILL_FLASH_ATTENTION(float)
CODISTILL_FLASH_ATTENTION(double)
#undef CODISTILL_FLASH_ATTENTION

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

namespace {
// The sizes the op reads and writes, checked before anything is written.
void check_flash(const Tensor& qkv, const Tensor& y, const Tensor& lse, const AttentionShape& s, const char* what) {
  s.validate();
  const std::string w(what);
  check_shape(qkv, {s.rows(), 3 * s.d_model()}, (w + ": qkv").c_str());
  check_shape(y, {s.rows(), s.d_model()}, (w + ": y").c_str());
  check_shape(lse, {s.batch, s.heads, s.seq}, (w + ": lse").c_str());
}
}  // namespace

void CpuBackend::flash_attention_forward(const Tensor& qkv, Tensor& y, Tensor& lse, const AttentionShape& s,
                                         Queue& q) {
  run_op(*this, Op::flash_attention, qkv.dtype(), "flash_attention", [&]<class T>() {
    check_flash(qkv, y, lse, s, "flash_attention");
    cpu::flash_attention_forward<T>(qkv.data<T>(), y.data<T>(), lse.data<T>(), s, impl_of(q));
  });
}

void CpuBackend::flash_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy,
                                          Tensor& dqkv, const AttentionShape& s, Queue& q) {
  run_op(*this, Op::flash_attention, dy.dtype(), "flash_attention backward", [&]<class T>() {
    check_flash(qkv, y, lse, s, "flash_attention backward");
    check_shape(dy, y.shape(), "flash_attention backward: dy");
    check_shape(dqkv, qkv.shape(), "flash_attention backward: dqkv");
    cpu::flash_attention_backward<T>(qkv.data<T>(), y.data<T>(), lse.data<T>(), dy.data<T>(), dqkv.data<T>(), s,
                                     impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
