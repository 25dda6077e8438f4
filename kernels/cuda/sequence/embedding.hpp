#pragma once
// Embedding lookup on CUDA, float32 (semantics: EmbeddingShape in kernels/ops.hpp; the CPU
// twin kernels/cpu/sequence/embedding.hpp; kernels in device/embedding.cuh). ids int32 [rows]
// on the device. An id outside [0, vocab) throws std::out_of_range naming the first such row
// and its id, with y (dtable) untouched; each call synchronizes the host once for that
// verdict.
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

void embedding_forward(const std::int32_t* ids, const float* table, float* y, const EmbeddingShape& s,
                       const Context& ctx);
// A table held as bf16 (Op::embedding_bf16_table, a forward-only model's): rows read as stored
// and widened to float32, exact.
void embedding_forward(const std::int32_t* ids, const std::uint16_t* table_bf16, float* y, const EmbeddingShape& s,
                       const Context& ctx);
// dtable += scatter of dy by ids, in the order of the rows (bit-identical to the CPU's).
void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, const EmbeddingShape& s,
                        const Context& ctx);

}  // namespace codistill::kernels::cuda
