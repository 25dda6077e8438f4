#pragma once
// Helpers shared by the layers: reusable output/grad buffers and input checks.
//
// Buffer contract: a layer's forward/backward returns a Tensor that shares the layer's
// own member buffer (no copy). It stays valid until that layer's next forward/backward;
// Model::forward clones the final logits on the CPU so callers never see a buffer change
// under them (on CUDA it does not: see Model::forward).
#include <stdexcept>
#include <string>

#include "kernels/cuda/memory.hpp"
#include "kernels/tensor.hpp"

namespace codistill::nn {

// Reallocates buf only when its shape, dtype or device changes: the training hot path runs
// with a fixed batch shape, so after the first step no layer allocates.
// A CUDA buffer is replaced only once its device is idle: the caching allocator hands a
// freed block to the next request at once, from any stream or thread (a teacher loading
// on the watcher thread), while kernels queued earlier may still use it. Shape changes are
// rare (evaluation batches), so the wait costs nothing in the training loop.
inline kernels::Tensor& ensure_buffer(kernels::Tensor& buf, const kernels::Shape& shape, kernels::DType dtype,
                                      kernels::Device device = kernels::Device::cpu()) {
  if (!buf.defined() || buf.dtype() != dtype || buf.shape() != shape || buf.device() != device) {
    if (buf.defined() && buf.device().is_cuda()) kernels::cuda::synchronize(buf.device().index);
    buf = kernels::Tensor::empty(shape, dtype, device);
  }
  return buf;
}

// The input must be where the layer is (Layer::to_device), in the layer's dtype; on CUDA
// that dtype is float32 (float64 exists for gradient checks, which run on the CPU).
inline void check_input(const kernels::Tensor& x, kernels::DType expected, kernels::Device layer_device,
                        const char* layer) {
  if (x.device() != layer_device)
    throw std::invalid_argument(std::string(layer) + ": input is on " + x.device().str() + " but the layer is on " +
                                layer_device.str() + " (Model::to_device moves a model)");
  if (layer_device.is_cuda() && x.dtype() != kernels::DType::f32)
    throw std::invalid_argument(std::string(layer) + ": input is " + kernels::dtype_name(x.dtype()) +
                                "; CUDA layers run in float32 only (float64 gradient checks run on the CPU)");
  if (x.dtype() != expected)
    throw std::invalid_argument(std::string(layer) + ": input is " + kernels::dtype_name(x.dtype()) +
                                " but the parameters are " + kernels::dtype_name(expected) +
                                " (convert with to_dtype)");
}

}  // namespace codistill::nn
