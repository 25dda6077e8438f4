// Flash attention with bf16 GEMM operands (Compute::bf16; flash_attention_fast.hpp): the
// float32 path's blocks, schedules and summation order, with every operand of every product
// rounded to bf16 once, where it is made: the q, k, v and dy tiles as they are loaded (copied
// contiguous, row stride head_dim), P and dS as the softmax loops leave them. The products
// then run as float32 GEMMs on the rounded values: a product of two bf16 values is exact in
// float32, so this is bf16 multiplication with float32 accumulation. On this project's Xeon
// (AVX-512 BF16) vdpbf16ps has half the throughput of float32 FMA (88 against 185 GFLOP/s
// per core), so widening on load and multiplying in float32 is the fast way as well as the
// simple one; rounding a tile costs 1/(2 kFlashBlock) of the products that read it.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/sequence/flash_attention_blocks.hpp"
#include "kernels/cpu/sequence/flash_attention_fast.hpp"
#include "kernels/cpu/sequence/flash_attention_rows.hpp"

namespace codistill::kernels::cpu::flash {
namespace {

// ---- the loops around the GEMMs, one non-inlined copy per ISA (kernels/cpu/isa.hpp) ----

#define CODISTILL_FLASH_BF16_ROWS(suffix, target)                                                                   \
  template <class T>                                                                                               \
  target void softmax_##suffix(T* S, std::int64_t ld, std::int64_t rows, std::int64_t cols, std::int64_t q0,        \
                               std::int64_t k0, T* m, T* l, T* O, std::int64_t hd) {                               \
    online_softmax<true>(S, ld, rows, cols, q0, k0, m, l, O, hd);                                                  \
  }                                                                                                                \
  template <class T>                                                                                               \
  target void dscores_##suffix(T* S, T* dP, std::int64_t ld, std::int64_t rows, std::int64_t cols,                  \
                               std::int64_t q0, std::int64_t k0, const T* lse, const T* Di) {                      \
    probs_and_dscores<true>(S, dP, ld, rows, cols, q0, k0, lse, Di);                                               \
  }                                                                                                                \
  template <class T>                                                                                               \
  target void load_##suffix(const T* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, T* dst) {         \
    load_operand(src, ld, rows, cols, dst);                                                                        \
  }
CODISTILL_FLASH_BF16_ROWS(avx512, CODISTILL_TARGET_AVX512)
CODISTILL_FLASH_BF16_ROWS(avx2, CODISTILL_TARGET_AVX2)
CODISTILL_FLASH_BF16_ROWS(baseline, )
#undef CODISTILL_FLASH_BF16_ROWS

template <class T>
struct Fns {
  void (*softmax)(T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, T*, T*, T*, std::int64_t);
  void (*dscores)(T*, T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, const T*, const T*);
  void (*load)(const T*, std::int64_t, std::int64_t, std::int64_t, T*);
};
template <class T>
Fns<T> fns(Isa isa) {
  switch (isa) {
    case Isa::avx512: return {softmax_avx512<T>, dscores_avx512<T>, load_avx512<T>};
    case Isa::avx2: return {softmax_avx2<T>, dscores_avx2<T>, load_avx2<T>};
    default: return {softmax_baseline<T>, dscores_baseline<T>, load_baseline<T>};
  }
}

// One thread's buffers: the rounded tiles [kB, hd] of q, k, v, dy, the scores and dP/dS
// [kB, kB], and the forward's O [kB, hd], m and l.
template <class T>
struct Tiles {
  explicit Tiles(std::int64_t hd) : buf(static_cast<std::size_t>(5 * kB * hd + 2 * kB * kB + 2 * kB)) {
    T* at = buf.data();
    for (T** tile : {&q, &k, &v, &dy, &O}) *tile = at, at += kB * hd;
    S = at, dP = at + kB * kB, m = at + 2 * kB * kB, l = m + kB;
  }
  std::vector<T> buf;
  T *q, *k, *v, *dy, *O, *S, *dP, *m, *l;
};

// ---- forward: one task per (pair, query block) ----

template <class T>
void forward_block(const Pair<T>& p, std::int64_t qb, const AttentionShape& s, const Fns<T>& fn, T* y, T* lse,
                   Tiles<T>& t) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), hd = p.hd;
  const T scale = static_cast<T>(s.scale());
  fn.load(p.q + q0 * p.ld, p.ld, nq, hd, t.q);
  std::fill(t.O, t.O + nq * hd, T(0));
  std::fill(t.m, t.m + nq, -std::numeric_limits<T>::infinity());
  std::fill(t.l, t.l + nq, T(0));
  for (std::int64_t kb = 0; kb <= qb; ++kb) {  // key blocks past qb lie wholly above the diagonal
    const std::int64_t k0 = kb * kB, nk = p.len(kb);
    fn.load(p.k + k0 * p.ld, p.ld, nk, hd, t.k);
    fn.load(p.v + k0 * p.ld, p.ld, nk, hd, t.v);
    gemm_serial<T>(false, true, nq, nk, hd, scale, t.q, hd, t.k, hd, T(0), t.S, kB);
    fn.softmax(t.S, kB, nq, nk, q0, k0, t.m, t.l, t.O, hd);             // S becomes P, rounded
    gemm_serial<T>(false, false, nq, hd, nk, T(1), t.S, kB, t.v, hd, T(1), t.O, hd);  // O += P v
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    const T inv = T(1) / t.l[r];
    T* out = y + row_off(s, p.bh, q0 + r);
    for (std::int64_t c = 0; c < hd; ++c) out[c] = t.O[r * hd + c] * inv;
    lse[p.bh * p.seq + q0 + r] = t.m[r] + std::log(t.l[r]);
  }
}

// ---- backward: dk, dv by key block, dq by query block (flash_attention_fast.cpp's order) ----

template <class T>
struct Bwd {
  const AttentionShape& s;
  Fns<T> fn;
  const T *dy, *lse, *Di;  // Di [pairs * seq]: dy_i . y_i, dy rounded
  T* dqkv;
};

template <class T>
void load_query(const Bwd<T>& w, const Pair<T>& p, std::int64_t qb, Tiles<T>& t) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb);
  w.fn.load(p.q + q0 * p.ld, p.ld, nq, p.hd, t.q);
  w.fn.load(w.dy + row_off(w.s, p.bh, q0), p.D, nq, p.hd, t.dy);
}
template <class T>
void load_key(const Bwd<T>& w, const Pair<T>& p, std::int64_t kb, Tiles<T>& t) {
  const std::int64_t k0 = kb * kB, nk = p.len(kb);
  w.fn.load(p.k + k0 * p.ld, p.ld, nk, p.hd, t.k);
  w.fn.load(p.v + k0 * p.ld, p.ld, nk, p.hd, t.v);
}

// Block step (qb, kb) on the loaded tiles: S becomes P, dP becomes dS, both rounded.
template <class T>
void block_dscores(const Bwd<T>& w, const Pair<T>& p, std::int64_t qb, std::int64_t kb, Tiles<T>& t) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), k0 = kb * kB, nk = p.len(kb), hd = p.hd;
  gemm_serial<T>(false, true, nq, nk, hd, static_cast<T>(w.s.scale()), t.q, hd, t.k, hd, T(0), t.S, kB);
  gemm_serial<T>(false, true, nq, nk, hd, T(1), t.dy, hd, t.v, hd, T(0), t.dP, kB);  // dP = dy v^T
  const std::int64_t at = p.bh * p.seq + q0;
  w.fn.dscores(t.S, t.dP, kB, nq, nk, q0, k0, w.lse + at, w.Di + at);
}

// Key block kb: dk and dv of its rows over the query blocks that see it; with_dq also each
// step's share of dq (the caller zeroed the pair's dq and runs its key blocks in order).
template <class T>
void key_block(const Bwd<T>& w, const Pair<T>& p, std::int64_t kb, bool with_dq, Tiles<T>& t) {
  const std::int64_t k0 = kb * kB, nk = p.len(kb), hd = p.hd;
  const T scale = static_cast<T>(w.s.scale());
  T *dq = w.dqkv + p.off, *dk = dq + p.D, *dv = dq + 2 * p.D;
  zero_rows(dk, p.ld, k0, nk, hd), zero_rows(dv, p.ld, k0, nk, hd);
  load_key(w, p, kb, t);
  for (std::int64_t qb = kb; qb < p.blocks(); ++qb) {
    const std::int64_t q0 = qb * kB, nq = p.len(qb);
    load_query(w, p, qb, t);
    block_dscores(w, p, qb, kb, t);
    gemm_serial<T>(true, false, nk, hd, nq, T(1), t.S, kB, t.dy, hd, T(1), dv + k0 * p.ld, p.ld);  // dv += P^T dy
    gemm_serial<T>(true, false, nk, hd, nq, scale, t.dP, kB, t.q, hd, T(1), dk + k0 * p.ld,
                   p.ld);  // dk += scale dS^T q
    if (with_dq) gemm_serial<T>(false, false, nq, hd, nk, scale, t.dP, kB, t.k, hd, T(1), dq + q0 * p.ld, p.ld);
  }
}

// Query block qb: its dq over the key blocks it sees, in key order.
template <class T>
void query_block(const Bwd<T>& w, const Pair<T>& p, std::int64_t qb, Tiles<T>& t) {
  const std::int64_t q0 = qb * kB, nq = p.len(qb), hd = p.hd;
  T* dq = w.dqkv + p.off;
  zero_rows(dq, p.ld, q0, nq, hd);
  load_query(w, p, qb, t);
  for (std::int64_t kb = 0; kb <= qb; ++kb) {
    load_key(w, p, kb, t);
    block_dscores(w, p, qb, kb, t);
    gemm_serial<T>(false, false, nq, hd, p.len(kb), static_cast<T>(w.s.scale()), t.dP, kB, t.k, hd, T(1),
                   dq + q0 * p.ld, p.ld);  // dq += scale dS k
  }
}

// Di = dy_i . y_i in double with dy rounded as the dP = dy v^T products read it, so that
// each row of dS sums to zero up to the rounding of P (the softmax backward's identity).
template <class T>
void row_dots(const T* y, const T* dy, const AttentionShape& s, std::int64_t bh, T* Di) {
  for (std::int64_t t = 0; t < s.seq; ++t) {
    const std::int64_t o = row_off(s, bh, t);
    double acc = 0;
    for (std::int64_t c = 0; c < s.head_dim; ++c) acc += static_cast<double>(operand(dy[o + c])) * y[o + c];
    Di[bh * s.seq + t] = static_cast<T>(acc);
  }
}

}  // namespace

template <class T>
void forward_bf16(const T* qkv, T* y, T* lse, const AttentionShape& s, Isa isa) {
  const std::int64_t pairs = s.batch * s.heads, nb = (s.seq + kB - 1) / kB, tasks = pairs * nb;
  const Fns<T> fn = fns<T>(isa);
#pragma omp parallel if (tasks > 1 && !omp_in_parallel())
  {
    Tiles<T> t(s.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < tasks; ++i)  // the last query blocks (the most keys) first
      forward_block(pair_of(qkv, s, i % pairs), nb - 1 - i / pairs, s, fn, y, lse, t);
  }
}

// The two schedules of flash_attention_blocks.hpp's kPairsPerThread.

template <class T>
void backward_bf16(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s, Isa isa) {
  const std::int64_t pairs = s.batch * s.heads, nb = (s.seq + kB - 1) / kB, tasks = pairs * nb;
  std::vector<T> Di(static_cast<std::size_t>(pairs * s.seq));
  const Bwd<T> w{s, fns<T>(isa), dy, lse, Di.data(), dqkv};
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool per_pair = threads == 1 || pairs >= static_cast<std::int64_t>(kPairsPerThread) * threads;
#pragma omp parallel if (tasks > 1 && threads > 1)
  {
    Tiles<T> t(s.head_dim);
    if (per_pair) {
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t bh = 0; bh < pairs; ++bh) {
        const Pair<T> p = pair_of(qkv, s, bh);
        row_dots(y, dy, s, bh, Di.data());
        zero_rows(dqkv + p.off, p.ld, 0, s.seq, s.head_dim);
        for (std::int64_t kb = 0; kb < nb; ++kb) key_block(w, p, kb, true, t);
      }
    } else {
#pragma omp for schedule(static)
      for (std::int64_t bh = 0; bh < pairs; ++bh) row_dots(y, dy, s, bh, Di.data());
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < tasks; ++i) key_block(w, pair_of(qkv, s, i % pairs), i / pairs, false, t);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < tasks; ++i) query_block(w, pair_of(qkv, s, i % pairs), nb - 1 - i / pairs, t);
    }
  }
}

#define CODISTILL_FLASH_BF16(T)                                                \
  template void forward_bf16<T>(const T*, T*, T*, const AttentionShape&, Isa); \
  template void backward_bf16<T>(const T*, const T*, const T*, const T*, T*, const AttentionShape&, Isa);
CODISTILL_FLASH_BF16(float)
CODISTILL_FLASH_BF16(double)
#undef CODISTILL_FLASH_BF16

}  // namespace codistill::kernels::cpu::flash
