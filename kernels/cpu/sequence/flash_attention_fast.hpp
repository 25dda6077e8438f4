#pragma once
// The fast path of flash attention (flash_attention.hpp), in its own file: block steps of
// kFlashBlock query rows against kFlashBlock key rows, OpenMP over (batch, head, block).
#include "kernels/cpu/isa.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu::flash {

template <class T>
void forward_fast(const T* qkv, T* y, T* lse, const AttentionShape& s, Isa isa);

// dqkv overwritten.
template <class T>
void backward_fast(const T* qkv, const T* y, const T* lse, const T* dy, T* dqkv, const AttentionShape& s, Isa isa);

}  // namespace codistill::kernels::cpu::flash
