// The registry of compute backends: one explicit list, no static-initializer
// registration. Adding a backend means adding one line to the list in backends().
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/cpu/backend.hpp"
#include "kernels/cuda/backend.hpp"

namespace codistill::kernels {

const std::vector<Backend*>& backends() {
  // The CUDA entry is always present: in a build without CUDA it is a stub that says so.
  static const std::vector<Backend*> list = {&cpu_backend(), &cuda_backend()};
  return list;
}

Backend& backend_for(DeviceKind kind) {
  for (Backend* b : backends())
    if (b->kind() == kind) return *b;
  throw std::logic_error("no backend registered for a device kind");
}

Queue& default_cpu_queue(bool reference) {
  // Built on first use (after the backend); a fast CPU queue makes its oneDNN state
  // (kernels/cpu/image/dnnl_conv.hpp) at its first convolution.
  static const std::unique_ptr<Queue> fast = cpu_backend().make_queue(Device::cpu(), {});
  static const std::unique_ptr<Queue> ref = cpu_backend().make_queue(Device::cpu(), {.reference = true});
  return reference ? *ref : *fast;
}

void require_support(const Backend& b, Op op, DType dtype, const char* what) {
  if (!b.supports(op, dtype))
    throw std::invalid_argument(std::string(what) + ": " + op_name(op) + " is not supported for " +
                                dtype_name(dtype) + " on " + b.name());
}

}  // namespace codistill::kernels

namespace codistill::kernels {

namespace {
// The defaults of the optional entry points: a backend that has not built them says so.
[[noreturn]] void not_built(const Backend& b, DType dtype, const char* what, Op op = Op::batchnorm_sync) {
  require_support(b, op, dtype, what);
  throw std::logic_error(std::string(what) + ": backend " + b.name() + " claims " + op_name(op) +
                         " but does not build it");
}
}  // namespace

void Backend::batchnorm_sums(const Tensor& x, const Tensor*, const Tensor&, const Tensor*, Tensor&,
                             const BatchNormShape&, Queue&) {
  not_built(*this, x.dtype(), "synchronized batchnorm");
}
void Backend::batchnorm_forward_synced(const Tensor& x, const Tensor&, const Tensor&, Tensor&, Tensor&, const Tensor&,
                                       Tensor&, Tensor&, Tensor&, const BatchNormShape&, Queue&) {
  not_built(*this, x.dtype(), "synchronized batchnorm");
}
void Backend::batchnorm_backward_synced(const Tensor& x, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, Tensor*, Tensor&, Tensor&,
                                        const BatchNormShape&, Queue&) {
  not_built(*this, x.dtype(), "synchronized batchnorm backward");
}

void Backend::add_activation(const Tensor& a, const Tensor&, Tensor&, Activation, Queue&) {
  not_built(*this, a.dtype(), "add with a fused activation", Op::add_activation);
}
void Backend::batchnorm_activation_forward(const Tensor& x, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                                           Tensor&, Tensor&, bool, Activation, const BatchNormShape&, Queue&) {
  not_built(*this, x.dtype(), "batchnorm with a fused activation", Op::batchnorm_activation);
}
void Backend::batchnorm_activation_backward(const Tensor& x, const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, Tensor*, Tensor&, Tensor&, bool,
                                            Activation, const BatchNormShape&, Queue&) {
  not_built(*this, x.dtype(), "batchnorm with a fused activation backward", Op::batchnorm_activation);
}

void Backend::flash_attention_forward(const Tensor& qkv, Tensor&, Tensor&, const AttentionShape&, Queue&) {
  not_built(*this, qkv.dtype(), "flash_attention", Op::flash_attention);
}
void Backend::flash_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor& dy, Tensor&,
                                       const AttentionShape&, Queue&) {
  not_built(*this, dy.dtype(), "flash_attention backward", Op::flash_attention);
}

}  // namespace codistill::kernels
