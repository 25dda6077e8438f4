#pragma once
// Embedding lookup on the CPU (semantics: EmbeddingShape in kernels/ops.hpp): ids int32
// [rows], table/dtable [vocab, dim], y/dy [rows, dim]. Ids are checked before anything is
// written (std::out_of_range naming the row and the id).
//   reference: one row at a time, in order.
//   fast:      forward rows in parallel; backward splits the columns of dtable among the
//              threads, each walking every row in order: the same additions in the same
//              order as the reference, so the result is bit-identical for any thread count.
#include <cstdint>

#include "kernels/cpu/impl.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cpu {

template <class T>
void embedding_forward(const std::int32_t* ids, const T* table, T* y, const EmbeddingShape& s,
                       Impl impl = Impl::fast);

// dtable += scatter of dy by ids.
template <class T>
void embedding_backward(const std::int32_t* ids, const T* dy, T* dtable, const EmbeddingShape& s,
                        Impl impl = Impl::fast);

}  // namespace codistill::kernels::cpu
