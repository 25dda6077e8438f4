#pragma once
// Causal multi-head self-attention without the T x T matrix (FlashAttention-2's scheme) on
// the CPU. Layouts as the materialized op's (AttentionShape in kernels/ops.hpp): qkv/dqkv
// [batch*seq, 3*D], y/dy [batch*seq, D]; lse [batch, heads, seq] holds, per query row, the
// log-sum-exp of its scaled, causally masked scores, so that the backward recomputes each
// probability as exp(s - lse) instead of reading it back.
//   reference: plain loops, one row of scores at a time, sums in double.
//   fast:      query and key blocks of kBlock rows (the tiles of one block step stay in
//              L1/L2); the block products are single-threaded library GEMMs (gemm_serial)
//              reading q, k, v in place, the softmax loops are compiled per ISA
//              (kernels/cpu/isa.hpp) with the vectorizable exp of vec_math.hpp. Key blocks
//              wholly above the diagonal are never visited.
// Every row of causal self-attention sees at least its own key (j = i), so no row is ever
// entirely masked: no 0/0 and no -inf log-sum-exp to guard against, T = 1 included.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

// Query and key rows per block of the fast path. At head_dim 64 in float32 a block of q, k
// or v is 32 KB and one of scores 64 KB: a block step's operands stay in L2. Measured on
// the loaded 2-thread Xeon (AVX-512) of bench/results/attention_cpu_2026-11-29.txt at
// T = 2048: 64 rows ~10% slower than 128 (more GEMM calls, each smaller), 256 within noise
// of 128 but with half the tasks to share out and more work wasted on the diagonal.
inline constexpr std::int64_t kFlashBlock = 128;

template <class T>
void flash_attention_forward(const T* qkv, T* y, T* lse, const AttentionShape& s, Impl impl = Impl::fast);

// dqkv overwritten.
template <class T>
void flash_attention_backward(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s,
                              Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
