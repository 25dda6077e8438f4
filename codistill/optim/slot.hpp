#pragma once
// Internal helpers of the optimizers: slot allocation and the parallel-loop threshold.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "codistill/models/model.hpp"
#include "codistill/util/device_memory.hpp"

namespace codistill::optim_detail {

// Below this many elements a parameter is updated on one thread: spawning the team costs
// more than the loop (biases, small layers).
inline constexpr std::int64_t kParallelMin = 1 << 15;

// Creates the slot as zeros like the parameter, on its device (lazily: state() or the
// first step), and follows the parameter into a new dtype (Model::to_dtype) or onto
// another device (Model::to_device) without losing its values.
inline void ensure_slot(kernels::Tensor& slot, const NamedParam& p) {
  const kernels::Tensor& v = *p.value;
  if (!slot.defined()) {
    slot = kernels::Tensor::zeros(v.shape(), v.dtype(), v.device());
    fence(v.device());  // a legacy-stream memset: the optimizer's stream does not wait for it
    return;
  }
  if (slot.shape() != v.shape())
    throw std::logic_error("optimizer: parameter '" + p.path + "' changed shape from " +
                           kernels::shape_str(slot.shape()) + " to " + kernels::shape_str(v.shape()));
  if (slot.dtype() == v.dtype() && slot.device() == v.device()) return;
  const kernels::Device from = slot.device();
  fence(from);  // the old stream may still update the slot
  if (slot.dtype() != v.dtype()) slot = slot.to(kernels::Device::cpu()).to(v.dtype());  // conversions run on the CPU
  slot = slot.to(v.device());
  fence(v.device());
}

inline void check_param(const NamedParam& p) {
  if (!p.value || !p.grad)
    throw std::invalid_argument("optimizer: parameter '" + p.path + "' has no value or grad");
  if (p.grad->dtype() != p.value->dtype() || p.grad->shape() != p.value->shape())
    throw std::invalid_argument("optimizer: grad of '" + p.path + "' does not match its value");
}

// The CUDA device all parameters are on, or nullopt when they are on the CPU. Mixed
// placements (and a grad elsewhere than its value) throw std::logic_error: checked per
// step, because the model may move after the optimizer was made.
template <class Slots>
std::optional<kernels::Device> cuda_device(const Slots& slots) {
  if (slots.empty() || slots.front().param.value->device().is_cpu()) {
    for (const auto& s : slots)
      if (!s.param.value->device().is_cpu() || !s.param.grad->device().is_cpu())
        throw std::logic_error("optimizer: parameter '" + s.param.path + "' is not on the CPU like the others");
    return std::nullopt;
  }
  const kernels::Device d = slots.front().param.value->device();
  for (const auto& s : slots)
    if (s.param.value->device() != d || s.param.grad->device() != d)
      throw std::logic_error("optimizer: parameter '" + s.param.path + "' (or its grad) is not on " + d.str() +
                             " like the others");
  return d;
}

// The stream to run a CUDA step on: the model's (Optimizer::set_cuda_context), never a
// default that would not be ordered with the backward pass that wrote the grads.
inline const kernels::cuda::Context& step_context(const std::optional<kernels::cuda::Context>& ctx,
                                                  kernels::Device device, const char* kind) {
  if (!ctx || ctx->device != device.index)
    throw std::logic_error(std::string(kind) + ": parameters are on " + device.str() +
                           "; call set_cuda_context with the model's stream (Model::cuda_context) first");
  return *ctx;
}

}  // namespace codistill::optim_detail
