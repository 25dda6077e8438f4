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
// compute (Compute::bf16, the queue's train.precision): every GEMM operand rounded to bf16
// with float32 accumulation, softmax statistics (max, sum, lse, Di) in float32:
//   q k^T, dy v^T  from the q, k, v, dy tiles, each rounded once as it is loaded;
//   P v            with P = exp(s - running max) rounded as the online softmax leaves it
//                  (before its normalization: FlashAttention-2's order on GPUs too);
//   P^T dy, dS k, dS^T q   with P = exp(s - lse) and dS = P (dP - Di) rounded after
//                  dS is made from the unrounded P; Di = round(dy_i) . y_i.
//   The reference rounds the same values at the same points (the forward's P by the same
//   128-key blocks and running max) and computes in double, one row at a time. float64
//   ignores Compute (as the GEMM ops do) in the backend; called here directly with bf16,
//   the fast path runs the bf16 path's tiles unrounded (the gradient checks' way into it).
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
void flash_attention_forward(const T* qkv, T* y, T* lse, const AttentionShape& s, Impl impl = Impl::fast,
                             Compute compute = Compute::f32);

// dqkv overwritten.
template <class T>
void flash_attention_backward(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s,
                              Impl impl = Impl::fast, Compute compute = Compute::f32);

}  // namespace codistill::kernels::cpu
