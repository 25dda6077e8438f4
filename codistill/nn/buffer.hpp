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
// with a fixed batch shape, so after the first step no module allocates. The old buffer is
// released without waiting: the CPU queue runs its work inline, and the CUDA allocator hands
// a freed block out again only after the work queued on every stream up to the free has
// completed (kernels/cuda/allocator.hpp), so no host synchronization is needed here.
inline kernels::Tensor& ensure_buffer(kernels::Tensor& buf, const kernels::Shape& shape, kernels::DType dtype,
                                      kernels::Queue& q) {
  if (!buf.defined() || buf.dtype() != dtype || buf.shape() != shape || buf.device() != q.device())
    buf = kernels::Tensor::empty(shape, dtype, q.device());
  return buf;
}

}  // namespace codistill::nn
