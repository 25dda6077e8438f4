#include "kernels/cpu/sequence/flash_attention_fast.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/sequence/flash_attention.hpp"
#include "kernels/cpu/sequence/flash_attention_blocks.hpp"
#include "kernels/cpu/sequence/flash_attention_rows.hpp"

namespace codistill::kernels::cpu::flash {
namespace {

// ---- the softmax loops, one non-inlined copy per ISA (kernels/cpu/isa.hpp) ----

template <class T>
using SoftmaxFn = void (*)(T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*, T*, T*,
                           std::int64_t);
template <class T>
using DscoresFn = void (*)(T*, T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*,
                           const T*);

#define CODISTILL_FLASH_ROWS(suffix, target)                                                                  \
  template <class T>                                                                                          \
  target void softmax_##suffix(T* S, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::int64_t q0,   \
                               std::int64_t k0, T* m, T* l, T* O, std::int64_t hd) {                          \
    online_softmax<false>(S, ld, rows, cols, q0, k0, m, l, O, hd);                                            \
  }                                                                                                           \
  template <class T>                                                                                          \
  target void dscores_##suffix(T* S, T* dP, std::int64_t ld, std::int64_t rows, std::int64_t cols,             \
                               std::int64_t q0, std::int64_t k0, const T* lse, const T* Di) {                 \
    probs_and_dscores<false>(S, dP, ld, rows, cols, q0, k0, lse, Di);                                         \
  }
CODISTILL_FLASH_ROWS(avx512, CODISTILL_TARGET_AVX512)
CODISTILL_FLASH_ROWS(avx2, CODISTILL_TARGET_AVX2)
CODISTILL_FLASH_ROWS(baseline, )
#undef CODISTILL_FLASH_ROWS

template <class T>
struct RowFns {
  SoftmaxFn<T> softmax;
  DscoresFn<T> dscores;
};
template <class T>
RowFns<T> row_fns(Isa isa) {
  switch (isa) {
    case Isa::avx512: return {softmax_avx512<T>, dscores_avx512<T>};
    case Isa::avx2: return {softmax_avx2<T>, dscores_avx2<T>};
    default: return {softmax_baseline<T>, dscores_baseline<T>};
  }
}

// ---- forward: one task per (pair, query block) ----

template <class T>
void forward_block(const Pair<T>& p, std::int64_t qb, const AttentionShape& s, const RowFns<T>& fn, T* y, T* lse,
                   T* S, T* O, T* m, T* l) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), hd = p.hd;
  const T scale = static_cast<T>(s.scale());
  std::fill(O, O + nq * hd, T(0));
  std::fill(m, m + nq, -std::numeric_limits<T>::infinity());
  std::fill(l, l + nq, T(0));
  for (std::int64_t kb = 0; kb <= qb; ++kb) {  // key blocks past qb lie wholly above the diagonal
    const std::int64_t k0 = kb * kB, nk = p.len(kb);
    gemm_serial<T>(false, true, nq, nk, hd, scale, p.q + q0 * p.ld, p.ld, p.k + k0 * p.ld, p.ld, T(0), S, kB);
    fn.softmax(S, kB, nq, nk, q0, k0, m, l, O, hd);
    gemm_serial<T>(false, false, nq, hd, nk, T(1), S, kB, p.v + k0 * p.ld, p.ld, T(1), O, hd);  // O += P v
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    const T inv = T(1) / l[r];
    T* out = y + row_off(s, p.bh, q0 + r);
    for (std::int64_t c = 0; c < hd; ++c) out[c] = O[r * hd + c] * inv;
    lse[p.bh * p.seq + q0 + r] = m[r] + std::log(l[r]);
  }
}

// ---- backward: dk, dv by key block, dq by query block ----

// What every block step of the backward reads.
template <class T>
struct Bwd {
  const AttentionShape& s;
  RowFns<T> fn;
  const T *dy, *lse, *Di;  // Di [pairs * seq]: dy_i . y_i
  T* dqkv;
};

// Block step (qb, kb) of pair p: S becomes P, dP becomes dS (both [nq, nk], row stride kB).
template <class T>
void block_dscores(const Bwd<T>& w, const Pair<T>& p, std::int64_t qb, std::int64_t kb, T* S, T* dP) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), k0 = kb * kB, nk = p.len(kb), hd = p.hd;
  const T scale = static_cast<T>(w.s.scale());
  gemm_serial<T>(false, true, nq, nk, hd, scale, p.q + q0 * p.ld, p.ld, p.k + k0 * p.ld, p.ld, T(0), S, kB);
  gemm_serial<T>(false, true, nq, nk, hd, T(1), w.dy + row_off(w.s, p.bh, q0), p.D, p.v + k0 * p.ld, p.ld, T(0), dP,
                 kB);  // dP = dy v^T
  const std::int64_t at = p.bh * p.seq + q0;
  w.fn.dscores(S, dP, kB, nq, nk, q0, k0, w.lse + at, w.Di + at);
}

// Key block kb of pair p: dk and dv of its rows, summed over the query blocks that see it;
// with_dq also adds each step's share of dq (the caller zeroed the pair's dq and runs this
// pair's key blocks in order, so that dq sums in the order query_block uses).
template <class T>
void key_block(const Bwd<T>& w, const Pair<T>& p, std::int64_t kb, bool with_dq, T* S, T* dP) {
  const std::int64_t k0 = kb * kB, nk = p.len(kb), hd = p.hd;
  const T scale = static_cast<T>(w.s.scale());
  T *dq = w.dqkv + p.off, *dk = dq + p.D, *dv = dq + 2 * p.D;
  zero_rows(dk, p.ld, k0, nk, hd), zero_rows(dv, p.ld, k0, nk, hd);
  for (std::int64_t qb = kb; qb < p.blocks(); ++qb) {
    const std::int64_t q0 = qb * kB, nq = p.len(qb);
    block_dscores(w, p, qb, kb, S, dP);
    gemm_serial<T>(true, false, nk, hd, nq, T(1), S, kB, w.dy + row_off(w.s, p.bh, q0), p.D, T(1), dv + k0 * p.ld,
                   p.ld);  // dv += P^T dy
    gemm_serial<T>(true, false, nk, hd, nq, scale, dP, kB, p.q + q0 * p.ld, p.ld, T(1), dk + k0 * p.ld,
                   p.ld);  // dk += scale dS^T q
    if (with_dq)
      gemm_serial<T>(false, false, nq, hd, nk, scale, dP, kB, p.k + k0 * p.ld, p.ld, T(1), dq + q0 * p.ld, p.ld);
  }
}

// Query block qb of pair p: its dq, summed over the key blocks it sees, in key order.
template <class T>
void query_block(const Bwd<T>& w, const Pair<T>& p, std::int64_t qb, T* S, T* dP) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), hd = p.hd;
  const T scale = static_cast<T>(w.s.scale());
  T* dq = w.dqkv + p.off;
  zero_rows(dq, p.ld, q0, nq, hd);
  for (std::int64_t kb = 0; kb <= qb; ++kb) {
    block_dscores(w, p, qb, kb, S, dP);
    gemm_serial<T>(false, false, nq, hd, p.len(kb), scale, dP, kB, p.k + kb * kB * p.ld, p.ld, T(1), dq + q0 * p.ld,
                   p.ld);  // dq += scale dS k
  }
}

// Di = dy_i . y_i for the rows of pair bh, summed in double: the term every dS of row i
// subtracts. Computed inside the backward's parallel region (by each pair's task, or in an
// `omp for` before the key blocks) rather than in a region of its own: one fork and join
// fewer, each of which waits for the slowest thread (on a loaded machine, a preempted one).
template <class T>
void row_dots(const T* y, const T* dy, const AttentionShape& s, std::int64_t bh, T* Di) {
  for (std::int64_t t = 0; t < s.seq; ++t) {
    const std::int64_t o = row_off(s, bh, t);
    double acc = 0;
    for (std::int64_t c = 0; c < s.head_dim; ++c) acc += static_cast<double>(dy[o + c]) * y[o + c];
    Di[bh * s.seq + t] = static_cast<T>(acc);
  }
}

}  // namespace

template <class T>
void forward_fast(const T* qkv, T* y, T* lse, const AttentionShape& s, Isa isa) {
  const std::int64_t pairs = s.batch * s.heads, nb = (s.seq + kB - 1) / kB, tasks = pairs * nb;
  const RowFns<T> fn = row_fns<T>(isa);
#pragma omp parallel if (tasks > 1 && !omp_in_parallel())
  {
    std::vector<T> S(static_cast<std::size_t>(kB * kB)), O(static_cast<std::size_t>(kB * s.head_dim)),
        ml(static_cast<std::size_t>(2 * kB));
    // Task t: the last query blocks first (they see the most keys), so that the short ones
    // fill in at the end.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t qb = nb - 1 - t / pairs, bh = t % pairs;
      forward_block(pair_of(qkv, s, bh), qb, s, fn, y, lse, S.data(), O.data(), ml.data(), ml.data() + kB);
    }
  }
}

// Two schedules (flash_attention_blocks.hpp's kPairsPerThread says which runs).

template <class T>
void backward_fast(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s, Isa isa) {
  const std::int64_t pairs = s.batch * s.heads, nb = (s.seq + kB - 1) / kB, tasks = pairs * nb;
  std::vector<T> Di(static_cast<std::size_t>(pairs * s.seq));
  const Bwd<T> w{s, row_fns<T>(isa), dy, lse, Di.data(), dqkv};
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool per_pair = threads == 1 || pairs >= static_cast<std::int64_t>(kPairsPerThread) * threads;
#pragma omp parallel if (tasks > 1 && threads > 1)
  {
    std::vector<T> S(static_cast<std::size_t>(kB * kB)), dP(static_cast<std::size_t>(kB * kB));
    if (per_pair) {
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t bh = 0; bh < pairs; ++bh) {
        const Pair<T> p = pair_of(qkv, s, bh);
        row_dots(y, dy, s, bh, Di.data());
        zero_rows(dqkv + p.off, p.ld, 0, s.seq, s.head_dim);
        for (std::int64_t kb = 0; kb < nb; ++kb) key_block(w, p, kb, true, S.data(), dP.data());
      }
    } else {
#pragma omp for schedule(static)
      for (std::int64_t bh = 0; bh < pairs; ++bh) row_dots(y, dy, s, bh, Di.data());
      // The first key blocks and the last query blocks see the most of the other kind: first.
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t t = 0; t < tasks; ++t)
        key_block(w, pair_of(qkv, s, t % pairs), t / pairs, false, S.data(), dP.data());
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t t = 0; t < tasks; ++t)
        query_block(w, pair_of(qkv, s, t % pairs), nb - 1 - t / pairs, S.data(), dP.data());
    }
  }
}

#define CODISTILL_FLASH_FAST(T)                                                                  \
  template void forward_fast<T>(const T*, T*, T*, const AttentionShape&, Isa);                   \
  template void backward_fast<T>(const T*, const T*, const T*, const T*, T*, const AttentionShape&, Isa);
CODISTILL_FLASH_FAST(float)
CODISTILL_FLASH_FAST(double)
#undef CODISTILL_FLASH_FAST

}  // namespace codistill::kernels::cpu::flash
