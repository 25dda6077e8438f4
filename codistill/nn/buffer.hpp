#pragma once
// Helpers shared by the layers: reusable output/grad buffers and input checks.
//
// Buffer contract: a layer's forward/backward returns a Tensor that shares the layer's
// own member buffer (no copy). It stays valid until that layer's next forward/backward;
// Model::forward clones the final logits so callers never see a buffer change under them.
#include <stdexcept>
#include <string>

#include "kernels/tensor.hpp"

namespace codistill::nn {

// Reallocates buf only when its shape or dtype changes: the training hot path runs with a
// fixed batch shape, so after the first step no layer allocates.
inline kernels::Tensor& ensure_buffer(kernels::Tensor& buf, const kernels::Shape& shape,
                                      kernels::DType dtype) {
  if (!buf.defined() || buf.dtype() != dtype || buf.shape() != shape)
    buf = kernels::Tensor::empty(shape, dtype);
  return buf;
}

inline void check_cpu_dtype(const kernels::Tensor& x, kernels::DType expected, const char* layer) {
  if (!x.device().is_cpu())
    throw std::invalid_argument(std::string(layer) + ": input is on " + x.device().str() +
                                ", layers run on the CPU");
  if (x.dtype() != expected)
    throw std::invalid_argument(std::string(layer) + ": input is " + kernels::dtype_name(x.dtype()) +
                                " but the parameters are " + kernels::dtype_name(expected) +
                                " (convert with to_dtype)");
}

}  // namespace codistill::nn
