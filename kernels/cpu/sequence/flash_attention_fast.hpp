#pragma once
// The fast paths of flash attention (flash_attention.hpp), in files of their own: block steps
// of kFlashBlock query rows against kFlashBlock key rows, OpenMP over (batch, head, block).
//   *_fast (flash_attention_fast.cpp): float32 (float64) operands, read in place;
//   *_bf16 (flash_attention_bf16.cpp): Compute::bf16, every GEMM operand rounded to bf16:
//     q, k, v and dy tiles as they are loaded, P and dS as the softmax loops leave them.
//     float64 runs the same code with nothing rounded (the gradient checks' way into it).
#include "kernels/cpu/isa.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu::flash {

template <class T>
void forward_fast(const T* qkv, T* y, T* lse, const AttentionShape& s, Isa isa);

// dqkv overwritten.
template <class T>
void backward_fast(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s, Isa isa);

template <class T>
void forward_bf16(const T* qkv, T* y, T* lse, const AttentionShape& s, Isa isa);

template <class T>
void backward_bf16(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s, Isa isa);

}  // namespace codistill::kernels::cpu::flash
