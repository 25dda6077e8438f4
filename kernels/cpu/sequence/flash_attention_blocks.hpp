#pragma once
// The block bookkeeping that flash attention's two fast paths share (float32 operands:
// flash_attention_fast.cpp; bf16-rounded operands: flash_attention_bf16.cpp): one (batch,
// head) pair in the shared layouts, its blocks of kFlashBlock rows, and row offsets, so that
// both visit the same blocks in the same order.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/sequence/flash_attention.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu::flash {

inline constexpr std::int64_t kB = kFlashBlock;

// The backward's two schedules, with the same arithmetic (each output sums the same GEMM
// calls in the same order): on one thread, or with at least kPairsPerThread pairs per thread,
// one task per pair, which computes dq along with dk and dv (five GEMMs per block step); with
// fewer pairs (a long sequence of few heads), tasks per key block for dk, dv, then per query
// block for dq, which recomputes P and dS (seven GEMMs per step) but keeps every thread busy
// and no two writing one row.
inline constexpr int kPairsPerThread = 4;

// One (batch, head) pair in the shared layouts, and its block count.
template <class T>
struct Pair {
  const T *q, *k, *v;  // row 0 of the head in qkv (row stride ld)
  std::int64_t off;    // of q in qkv, and of the head's dq in dqkv
  std::int64_t bh, ld, D, hd, seq;
  std::int64_t blocks() const { return (seq + kB - 1) / kB; }
  std::int64_t len(std::int64_t block) const { return std::min(kB, seq - block * kB); }
};

template <class T>
Pair<T> pair_of(const T* qkv, const AttentionShape& s, std::int64_t bh) {
  const std::int64_t D = s.d_model(), ld = 3 * D;
  const std::int64_t off = (bh / s.heads) * s.seq * ld + (bh % s.heads) * s.head_dim;
  const T* q = qkv + off;
  return {q, q + D, q + 2 * D, off, bh, ld, D, s.head_dim, s.seq};
}

// Offset of row t of pair bh's head in a [batch*seq, D] tensor (y, dy).
inline std::int64_t row_off(const AttentionShape& s, std::int64_t bh, std::int64_t t) {
  return ((bh / s.heads) * s.seq + t) * s.d_model() + (bh % s.heads) * s.head_dim;
}

// Zeroes rows [t0, t0 + n) of a head's hd columns at `base` (row stride ld).
template <class T>
void zero_rows(T* base, std::int64_t ld, std::int64_t t0, std::int64_t n, std::int64_t hd) {
  for (std::int64_t t = t0; t < t0 + n; ++t) std::fill(base + t * ld, base + t * ld + hd, T(0));
}

}  // namespace codistill::kernels::cpu::flash
