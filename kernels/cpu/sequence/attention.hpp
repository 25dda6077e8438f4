#pragma once
// Causal multi-head self-attention core on the CPU (semantics and layouts: AttentionShape in
// kernels/ops.hpp): qkv/dqkv [batch*seq, 3*D], y/dy [batch*seq, D], probs/scratch
// [batch, heads, seq, seq].
//   reference: plain loops, sums in double.
//   fast:      (batch, head) pairs spread over OpenMP threads; per pair two single-threaded
//              OpenBLAS GEMMs reading q, k, v in place (leading dimension 3*D) and one
//              fused causal-softmax pass over the T x T scores (forward), three GEMMs and
//              a fused softmax-backward pass (backward). Pairs write disjoint columns of
//              y and dqkv, so results do not depend on the thread count.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

template <class T>
void attention_forward(const T* qkv, T* y, T* probs, const AttentionShape& s, Impl impl = Impl::fast);

// dqkv overwritten; scratch holds dP / dS per pair.
template <class T>
void attention_backward(const T* qkv, const T* probs, const T* dy, T* dqkv, T* scratch, const AttentionShape& s,
                        Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
