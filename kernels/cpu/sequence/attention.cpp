#include "kernels/cpu/sequence/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/gemm.hpp"

namespace codistill::kernels::cpu {
namespace {

// Pointers of one (batch b, head h) pair into the shared layouts.
struct Pair {
  std::int64_t q_off, y_off, p_off;  // q in qkv (k = +D, v = +2D), head in y, block in probs
};
Pair pair_of(const AttentionShape& s, std::int64_t b, std::int64_t h) {
  const std::int64_t T = s.seq, D = s.d_model();
  return {b * T * 3 * D + h * s.head_dim, b * T * D + h * s.head_dim, (b * s.heads + h) * T * T};
}

// ---- reference ----

template <class T>
void forward_reference(const T* qkv, T* y, T* probs, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  std::vector<double> row(static_cast<std::size_t>(Tn));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const Pair p = pair_of(s, b, h);
      const T *q = qkv + p.q_off, *k = q + D, *v = q + 2 * D;
      T* P = probs + p.p_off;
      for (std::int64_t i = 0; i < Tn; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < hd; ++c) dot += static_cast<double>(q[i * ld + c]) * k[j * ld + c];
          row[j] = dot * scale;
          mx = std::max(mx, row[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
        for (std::int64_t j = 0; j < Tn; ++j) P[i * Tn + j] = j <= i ? static_cast<T>(row[j] / sum) : T(0);
        for (std::int64_t c = 0; c < hd; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += static_cast<double>(P[i * Tn + j]) * v[j * ld + c];
          y[p.y_off + i * D + c] = static_cast<T>(acc);
        }
      }
    }
}

template <class T>
void backward_reference(const T* qkv, const T* probs, const T* dy, T* dqkv, T* scratch, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D;
  const double scale = s.scale();
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const Pair p = pair_of(s, b, h);
      const T *q = qkv + p.q_off, *k = q + D, *v = q + 2 * D, *P = probs + p.p_off, *g = dy + p.y_off;
      T *dq = dqkv + p.q_off, *dk = dq + D, *dv = dq + 2 * D, *dS = scratch + p.p_off;
      for (std::int64_t i = 0; i < Tn; ++i) {
        // dP_ij = dy_i . v_j, then dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')
        double dot_pdp = 0;
        for (std::int64_t j = 0; j < Tn; ++j) {
          double dp = 0;
          if (j <= i)
            for (std::int64_t c = 0; c < hd; ++c) dp += static_cast<double>(g[i * D + c]) * v[j * ld + c];
          dS[i * Tn + j] = static_cast<T>(dp);
          dot_pdp += static_cast<double>(P[i * Tn + j]) * dp;
        }
        for (std::int64_t j = 0; j < Tn; ++j)
          dS[i * Tn + j] = j <= i ? static_cast<T>(P[i * Tn + j] * (dS[i * Tn + j] - dot_pdp)) : T(0);
      }
      for (std::int64_t i = 0; i < Tn; ++i)
        for (std::int64_t c = 0; c < hd; ++c) {
          double aq = 0, ak = 0, av = 0;
          for (std::int64_t j = 0; j < Tn; ++j) {
            aq += static_cast<double>(dS[i * Tn + j]) * k[j * ld + c];  // dq_i = scale sum_j dS_ij k_j
            ak += static_cast<double>(dS[j * Tn + i]) * q[j * ld + c];  // dk_i = scale sum_j dS_ji q_j
            av += static_cast<double>(P[j * Tn + i]) * g[j * D + c];    // dv_i = sum_j P_ji dy_j
          }
          dq[i * ld + c] = static_cast<T>(scale * aq);
          dk[i * ld + c] = static_cast<T>(scale * ak);
          dv[i * ld + c] = static_cast<T>(av);
        }
    }
}

// ---- fast ----

// In place over the scores row S[i, 0..T): softmax of columns 0..i, zeros after.
template <class T>
void causal_softmax_row(T* S, std::int64_t i, std::int64_t Tn) {
  T mx = S[0];
  for (std::int64_t j = 1; j <= i; ++j) mx = std::max(mx, S[j]);
  T sum = 0;
  for (std::int64_t j = 0; j <= i; ++j) sum += (S[j] = std::exp(S[j] - mx));
  const T inv = T(1) / sum;
#pragma omp simd
  for (std::int64_t j = 0; j <= i; ++j) S[j] *= inv;
  for (std::int64_t j = i + 1; j < Tn; ++j) S[j] = T(0);
}

// In place over dP row i: dS = P (dP - sum P dP) for columns 0..i, zeros after.
template <class T>
void causal_softmax_backward_row(const T* P, T* dS, std::int64_t i, std::int64_t Tn) {
  T dot = 0;
#pragma omp simd reduction(+ : dot)
  for (std::int64_t j = 0; j <= i; ++j) dot += P[j] * dS[j];
#pragma omp simd
  for (std::int64_t j = 0; j <= i; ++j) dS[j] = P[j] * (dS[j] - dot);
  for (std::int64_t j = i + 1; j < Tn; ++j) dS[j] = T(0);
}

template <class T>
void forward_fast(const T* qkv, T* y, T* probs, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D, pairs = s.batch * s.heads;
  const T scale = static_cast<T>(s.scale());
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1 && !omp_in_parallel())
  for (std::int64_t bh = 0; bh < pairs; ++bh) {
    const Pair p = pair_of(s, bh / s.heads, bh % s.heads);
    const T *q = qkv + p.q_off, *k = q + D, *v = q + 2 * D;
    T* P = probs + p.p_off;
    gemm_serial<T>(false, true, Tn, Tn, hd, scale, q, ld, k, ld, T(0), P, Tn);  // S = scale q k^T
    for (std::int64_t i = 0; i < Tn; ++i) causal_softmax_row(P + i * Tn, i, Tn);
    gemm_serial<T>(false, false, Tn, hd, Tn, T(1), P, Tn, v, ld, T(0), y + p.y_off, D);  // y = P v
  }
}

template <class T>
void backward_fast(const T* qkv, const T* probs, const T* dy, T* dqkv, T* scratch, const AttentionShape& s) {
  const std::int64_t Tn = s.seq, D = s.d_model(), hd = s.head_dim, ld = 3 * D, pairs = s.batch * s.heads;
  const T scale = static_cast<T>(s.scale());
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1 && !omp_in_parallel())
  for (std::int64_t bh = 0; bh < pairs; ++bh) {
    const Pair p = pair_of(s, bh / s.heads, bh % s.heads);
    const T *q = qkv + p.q_off, *k = q + D, *v = q + 2 * D, *P = probs + p.p_off, *g = dy + p.y_off;
    T *dq = dqkv + p.q_off, *dk = dq + D, *dv = dq + 2 * D, *dS = scratch + p.p_off;
    gemm_serial<T>(false, true, Tn, Tn, hd, T(1), g, D, v, ld, T(0), dS, Tn);  // dP = dy v^T
    for (std::int64_t i = 0; i < Tn; ++i) causal_softmax_backward_row(P + i * Tn, dS + i * Tn, i, Tn);
    gemm_serial<T>(false, false, Tn, hd, Tn, scale, dS, Tn, k, ld, T(0), dq, ld);  // dq = scale dS k
    gemm_serial<T>(true, false, Tn, hd, Tn, scale, dS, Tn, q, ld, T(0), dk, ld);   // dk = scale dS^T q
    gemm_serial<T>(true, false, Tn, hd, Tn, T(1), P, Tn, g, D, T(0), dv, ld);      // dv = P^T dy
  }
}

}  // namespace

template <class T>
void attention_forward(const T* qkv, T* y, T* probs, const AttentionShape& s, Impl impl) {
  s.validate();
  if (impl == Impl::reference) forward_reference(qkv, y, probs, s);
  else forward_fast(qkv, y, probs, s);
}

template <class T>
void attention_backward(const T* qkv, const T* probs, const T* dy, T* dqkv, T* scratch, const AttentionShape& s,
                        Impl impl) {
  s.validate();
  if (impl == Impl::reference) backward_reference(qkv, probs, dy, dqkv, scratch, s);
  else backward_fast(qkv, probs, dy, dqkv, scratch, s);
}

#define CODISTILL_ATTENTION(T)                                                                          \
  template void attention_forward<T>(const T*, T*, T*, const AttentionShape&, Impl);                    \
  template void attention_backward<T>(const T*, const T*, const T*, T*, T*, const AttentionShape&, Impl);
CODISTILL_ATTENTION(float)
CODISTILL_ATTENTION(double)
#undef CODISTILL_ATTENTION

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s, Queue& q) {
  run_op(*this, Op::causal_attention, qkv.dtype(), "causal_attention", [&]<class T>() {
    cpu::attention_forward<T>(qkv.data<T>(), y.data<T>(), probs.data<T>(), s, impl_of(q));
  });
}

void CpuBackend::attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv,
                                    Tensor& scratch, const AttentionShape& s, Queue& q) {
  run_op(*this, Op::causal_attention, dy.dtype(), "causal_attention backward", [&]<class T>() {
    cpu::attention_backward<T>(qkv.data<T>(), probs.data<T>(), dy.data<T>(), dqkv.data<T>(), scratch.data<T>(), s,
                               impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
