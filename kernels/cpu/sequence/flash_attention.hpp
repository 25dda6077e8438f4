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

// Query and key rows per block of the fast path: at head_dim 64 a block of q, k, v or
// scores is 16 KB in float32, so one block step's operands fit a 48 KB L1 plus L2.
inline constexpr std::int64_t kFlashBlock = 64;

template <class T>
void flash_attention_forward(const T* qkv, T* y, T* lse, const AttentionShape& s, Impl impl = Impl::fast);

// dqkv overwritten.
template <class T>
void flash_attention_backward(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s,
                              Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
