#include "codistill/nn/layer.hpp"

#include <stdexcept>
#include <utility>

#include "codistill/util/device_memory.hpp"

namespace codistill {

namespace {

void check_cuda_dtype(Layer& layer, kernels::Device device) {
  if (!device.is_cuda()) return;
  for (const auto& p : layer.params())
    if (p.value->dtype() != kernels::DType::f32)
      throw std::invalid_argument(layer.kind() + ": parameter '" + p.name + "' is " +
                                  kernels::dtype_name(p.value->dtype()) +
                                  "; CUDA layers run in float32 only (to_dtype(float32) first)");
}

}  // namespace

void Layer::to_device(kernels::Device device, const kernels::cuda::Context& ctx) {
  check_cuda_dtype(*this, device);
  // Tensor::to copies on the legacy stream, which orders with neither the old stream (whose
  // kernels may still write the parameters) nor the new one: wait for both devices.
  fence(device_);
  for (auto& p : params()) {
    if (p.value->defined()) *p.value = p.value->to(device);
    if (p.grad->defined()) *p.grad = p.grad->to(device);
  }
  device_ = device;
  ctx_ = ctx;
  ctx_.device = device.is_cuda() ? device.index : 0;
  fence(device);
  // A zero_grad on CUDA that no backward has carried out yet still holds.
  if (std::exchange(overwrite_grads_, false)) zero_grad();
}

void Layer::to_device_uninitialized(kernels::Device device, const kernels::cuda::Context& ctx) {
  check_cuda_dtype(*this, device);
  fence(device_);  // nothing may still run on the memory released here
  for (auto& p : params()) {
    if (p.value->defined()) *p.value = kernels::Tensor::empty(p.value->shape(), p.value->dtype(), device);
    *p.grad = kernels::Tensor();
  }
  device_ = device;
  ctx_ = ctx;
  ctx_.device = device.is_cuda() ? device.index : 0;
  overwrite_grads_ = false;
}

void Layer::zero_grad() {
  if (device_.is_cuda()) {
    overwrite_grads_ = true;
    return;
  }
  for (auto& p : params()) p.grad->zero();
}

bool Layer::accumulate_grads() {
  const bool accumulate = !overwrite_grads_;
  overwrite_grads_ = false;
  return accumulate;
}

void Layer::require_grads(const char* layer) {
  for (const auto& p : params())
    if (!p.grad->defined())
      throw std::logic_error(std::string(layer) + ": backward on a forward-only copy (its grads were released)");
}

}  // namespace codistill
