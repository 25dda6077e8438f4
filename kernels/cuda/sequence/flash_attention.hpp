#pragma once
// Causal flash attention on CUDA, float32 (semantics and layouts: AttentionShape in
// kernels/ops.hpp and the CPU twin kernels/cpu/sequence/flash_attention.hpp): custom tile
// kernels (device/flash_attention.cuh, device/flash_attention_backward.cuh), no cuBLAS, no
// [T, T] tensor. head_dim up to shapes::kFlashMaxHeadDim (128); larger throws
// std::invalid_argument. Queued on the context's stream, no host synchronization.
#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

// qkv [B*T, 3D] -> y [B*T, D]; lse [B, H, T] saved for the backward.
void flash_attention_forward(const float* qkv, float* y, float* lse, const AttentionShape& s, const Context& ctx);
// dqkv [B*T, 3D] overwritten. Uses the stream's scratch for D = rowsum(dy * y) [B, H, T].
void flash_attention_backward(const float* qkv, const float* y, const float* lse, const float* dy, float* dqkv,
                              const AttentionShape& s, const Context& ctx);

}  // namespace codistill::kernels::cuda
