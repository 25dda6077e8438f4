#pragma once
// Reusable output/gradient buffers of the modules.
//
// Buffer contract: a module's forward/backward returns a Tensor that shares the module's
// own member buffer (no copy). It stays valid until that module's next forward/backward;
// Model::forward clones the final logits on the CPU so callers never see a buffer change
// under them (elsewhere it does not: see Model::forward).
#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

namespace codistill::nn {

// Reallocates buf only when its shape, dtype or device changes: the training hot path runs
// with a fixed batch shape, so after the first step no module allocates. Before an old
// buffer is released the queue is drained: an allocator may hand the freed block to the
// next request at once, from any queue or thread, while work queued earlier still uses it.
// Shape changes are rare (evaluation batches), so the wait costs nothing in training.
inline kernels::Tensor& ensure_buffer(kernels::Tensor& buf, const kernels::Shape& shape, kernels::DType dtype,
                                      kernels::Queue& q) {
  if (!buf.defined() || buf.dtype() != dtype || buf.shape() != shape || buf.device() != q.device()) {
    if (buf.defined()) q.synchronize();
    buf = kernels::Tensor::empty(shape, dtype, q.device());
  }
  return buf;
}

}  // namespace codistill::nn
