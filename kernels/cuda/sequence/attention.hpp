#pragma once
// The causal self-attention core on CUDA, float32 (semantics and layouts: AttentionShape in
// kernels/ops.hpp; the CPU twin kernels/cpu/sequence/attention.hpp). The products are cuBLAS
// strided-batched calls (plans/attention_plan.hpp, TF32 only when ctx.allow_tf32), the
// causal softmax and its backward custom kernels (device/attention.cuh). No host
// synchronization, no memory beyond the caller's tensors: dP/dS live in `scratch`.
#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

// qkv [B*T, 3D] -> y [B*T, D]; probs [B, H, T, T] saved for the backward.
void attention_forward(const float* qkv, float* y, float* probs, const AttentionShape& s, const Context& ctx);
// dqkv [B*T, 3D] overwritten; scratch [B, H, T, T] holds dP, then dS.
void attention_backward(const float* qkv, const float* probs, const float* dy, float* dqkv, float* scratch,
                        const AttentionShape& s, const Context& ctx);

}  // namespace codistill::kernels::cuda
