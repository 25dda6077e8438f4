#include "kernels/cpu/sequence/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/sequence/flash_attention_fast.hpp"

namespace codistill::kernels::cpu {
namespace {

// ---- reference: one row of scores at a time, sums in double ----
// With `round` (bf16 compute, float only) every value a GEMM of the fast path reads as an
// operand is rounded here as there (flash_attention.hpp): inputs through rounded copies,
// P and dS through as_operand, by way of float as the fast path holds them.

double as_operand(double x, bool round) { return round ? static_cast<double>(bf16_rounded(static_cast<float>(x))) : x; }

template <class T>
std::vector<T> rounded_copy(const T* x, std::int64_t n, bool round) {
  std::vector<T> out;
  if (round)
    for (std::int64_t i = 0; i < n; ++i) out.push_back(static_cast<T>(as_operand(x[i], true)));
  return out;
}

// y_i = sum_j w_j v_j / sum_j exp(p_j - mx) over the scores p of row i (keys 0..i). w_j is
// exp(p_j - mx), or with `round` the fast path's rounded exp(p_j - m_b), m_b the running
// max through j's key block, rescaled by exp(m_b - mx) as the online softmax rescales.
template <class T>
void reference_row(const std::vector<double>& p, std::int64_t i, double mx, bool round, const T* v, std::int64_t ld,
                   std::vector<double>& acc) {
  std::fill(acc.begin(), acc.end(), 0.0);
  double mb = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j <= i; ++j) {
    if (j % kFlashBlock == 0)
      for (std::int64_t t = j; t <= std::min(i, j + kFlashBlock - 1); ++t) mb = std::max(mb, p[t]);
    const double w = round ? as_operand(std::exp(p[j] - mb), true) * std::exp(mb - mx) : std::exp(p[j] - mx);
    for (std::size_t c = 0; c < acc.size(); ++c) acc[c] += w * v[j * ld + static_cast<std::int64_t>(c)];
  }
}

template <class T>
void forward_reference(const T* qkv_in, T* y, T* lse, const AttentionShape& s, bool round) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  const std::vector<T> rounded = rounded_copy(qkv_in, s.rows() * ld, round);
  const T* qkv = round ? rounded.data() : qkv_in;
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
        for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
        reference_row(p, i, mx, round, v, ld, acc);
        for (std::int64_t c = 0; c < hd; ++c) y[(b * Tn + i) * D + h * hd + c] = static_cast<T>(acc[c] / sum);
        lse[(b * s.heads + h) * Tn + i] = static_cast<T>(mx + std::log(sum));
      }
    }
}

// The gradients of one (batch, head) pair, summed in double (dq, dk, dv [Tn, hd]).
// dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij dy_i with
// P_ij = exp(s_ij - lse_i) and dS_ij = P_ij (dy_i . v_j - dy_i . y_i).
template <class T>
void backward_pair(const T* q, const T* yo, const T* g, const T* lse, const AttentionShape& s, bool round,
                   std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  const T *k = q + D, *v = q + 2 * D;
  for (std::int64_t i = 0; i < Tn; ++i) {
    double di = 0;
    for (std::int64_t c = 0; c < hd; ++c) di += static_cast<double>(g[i * D + c]) * yo[i * D + c];
    for (std::int64_t j = 0; j <= i; ++j) {
      double dot = 0, dp = 0;
      for (std::int64_t c = 0; c < hd; ++c) {
        dot += static_cast<double>(q[i * ld + c]) * k[j * ld + c];
        dp += static_cast<double>(g[i * D + c]) * v[j * ld + c];
      }
      const double p = std::exp(dot * scale - static_cast<double>(lse[i])), ds = p * (dp - di);
      const double pr = as_operand(p, round), dsr = as_operand(ds, round);
      for (std::int64_t c = 0; c < hd; ++c) {
        dv[j * hd + c] += pr * g[i * D + c];
        dk[j * hd + c] += scale * dsr * q[i * ld + c];
        dq[i * hd + c] += scale * dsr * k[j * ld + c];
      }
    }
  }
}

template <class T>
void backward_reference(const T* qkv_in, const T* y, const T* lse, const T* dy_in, T* dqkv, const AttentionShape& s,
                        bool round) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const std::vector<T> rq = rounded_copy(qkv_in, s.rows() * ld, round), rg = rounded_copy(dy_in, s.rows() * D, round);
  const T *qkv = round ? rq.data() : qkv_in, *dy = round ? rg.data() : dy_in;
  const std::size_t n = static_cast<std::size_t>(Tn * hd);
  std::vector<double> dq(n), dk(n), dv(n);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      std::fill(dq.begin(), dq.end(), 0.0), std::fill(dk.begin(), dk.end(), 0.0), std::fill(dv.begin(), dv.end(), 0.0);
      backward_pair(qkv + b * Tn * ld + h * hd, y + b * Tn * D + h * hd, dy + b * Tn * D + h * hd,
                    lse + (b * s.heads + h) * Tn, s, round, dq, dk, dv);
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

// bf16 rounds float operands only: float64 (the gradient checks') ignores Compute, except
// that its fast path then runs the bf16 path's code (flash_attention.hpp).
template <class T>
void flash_attention_forward(const T* qkv, T* y, T* lse, const AttentionShape& s, Impl impl, Compute compute) {
  s.validate();
  const bool bf16 = compute == Compute::bf16;
  if (impl == Impl::reference) forward_reference(qkv, y, lse, s, bf16 && std::is_same_v<T, float>);
  else if (bf16) flash::forward_bf16(qkv, y, lse, s, chosen_isa());
  else flash::forward_fast(qkv, y, lse, s, chosen_isa());
}

template <class T>
void flash_attention_backward(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s,
                              Impl impl, Compute compute) {
  s.validate();
  const bool bf16 = compute == Compute::bf16;
  if (impl == Impl::reference) backward_reference(qkv, y, lse, dy, dqkv, s, bf16 && std::is_same_v<T, float>);
  else if (bf16) flash::backward_bf16(qkv, y, lse, dy, dqkv, s, chosen_isa());
  else flash::backward_fast(qkv, y, lse, dy, dqkv, s, chosen_isa());
}

#define CODISTILL_FLASH_ATTENTION(T)                                                                  \
  template void flash_attention_forward<T>(const T*, T*, T*, const AttentionShape&, Impl, Compute);   \
  template void flash_attention_backward<T>(const T*, const T*, const T*, const T*, T*, const AttentionShape&, \
                                            Impl, Compute);
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
// The queue's compute for float32 (train.precision), float32 compute for float64 (which
// ignores it, as the GEMM ops do).
template <class T>
Compute compute_of(const Queue& q) {
  return std::is_same_v<T, float> ? q.options().compute : Compute::f32;
}
}  // namespace

void CpuBackend::flash_attention_forward(const Tensor& qkv, Tensor& y, Tensor& lse, const AttentionShape& s,
                                         Queue& q) {
  run_op(*this, Op::flash_attention, qkv.dtype(), "flash_attention", [&]<class T>() {
    check_flash(qkv, y, lse, s, "flash_attention");
    cpu::flash_attention_forward<T>(qkv.data<T>(), y.data<T>(), lse.data<T>(), s, impl_of(q), compute_of<T>(q));
  });
}

void CpuBackend::flash_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy,
                                          Tensor& dqkv, const AttentionShape& s, Queue& q) {
  run_op(*this, Op::flash_attention, dy.dtype(), "flash_attention backward", [&]<class T>() {
    check_flash(qkv, y, lse, s, "flash_attention backward");
    check_shape(dy, y.shape(), "flash_attention backward: dy");
    check_shape(dqkv, qkv.shape(), "flash_attention backward: dqkv");
    cpu::flash_attention_backward<T>(qkv.data<T>(), y.data<T>(), lse.data<T>(), dy.data<T>(), dqkv.data<T>(), s,
                                     impl_of(q), compute_of<T>(q));
  });
}

}  // namespace codistill::kernels::cpu
