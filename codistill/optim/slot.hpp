#pragma once
// Internal helpers of the optimizers: slot allocation and the parallel-loop threshold.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "codistill/models/model.hpp"

namespace codistill::optim_detail {

// Below this many elements a parameter is updated on one thread: spawning the team costs
// more than the loop (biases, small layers).
inline constexpr std::int64_t kParallelMin = 1 << 15;

// Creates the slot as zeros like the parameter (lazily: state() or the first step), and
// follows the parameter into a new dtype (Model::to_dtype) without losing its values.
inline void ensure_slot(kernels::Tensor& slot, const NamedParam& p) {
  const kernels::Tensor& v = *p.value;
  if (!slot.defined()) {
    slot = kernels::Tensor::zeros(v.shape(), v.dtype());
    return;
  }
  if (slot.shape() != v.shape())
    throw std::logic_error("optimizer: parameter '" + p.path + "' changed shape from " +
                           kernels::shape_str(slot.shape()) + " to " + kernels::shape_str(v.shape()));
  if (slot.dtype() != v.dtype()) slot = slot.to(v.dtype());
}

inline void check_param(const NamedParam& p) {
  if (!p.value || !p.grad)
    throw std::invalid_argument("optimizer: parameter '" + p.path + "' has no value or grad");
  if (p.grad->dtype() != p.value->dtype() || p.grad->shape() != p.value->shape())
    throw std::invalid_argument("optimizer: grad of '" + p.path + "' does not match its value");
}

}  // namespace codistill::optim_detail
