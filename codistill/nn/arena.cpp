#include "codistill/nn/arena.hpp"

#include <stdexcept>

namespace codistill {

using kernels::Tensor;

namespace {

constexpr std::int64_t kAlign = 16;  // elements: 64 bytes of float32, 128 of float64

std::vector<ArenaEntry> lay_out(const std::vector<std::pair<std::string, kernels::Shape>>& items, std::int64_t& total) {
  std::vector<ArenaEntry> out;
  total = 0;
  for (const auto& [path, shape] : items) {
    ArenaEntry e{path, shape, total, kernels::shape_numel(shape)};
    total += (e.numel + kAlign - 1) / kAlign * kAlign;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

void ParamArena::build(Module& root) {
  auto params = collect_params(root);
  auto buffers = collect_buffers(root);
  std::vector<std::pair<std::string, kernels::Shape>> p_items, b_items;
  for (auto& p : params) {
    if (p.value->dtype() != params.front().value->dtype() || p.value->device() != params.front().value->device())
      throw std::invalid_argument("parameter arena: '" + p.path + "' differs in dtype or device from '" +
                                  params.front().path + "'");
    p_items.emplace_back(p.path, p.value->shape());
  }
  for (auto& b : buffers) b_items.emplace_back(b.path, b.value->shape());
  std::int64_t np = 0, nb = 0;
  params_ = lay_out(p_items, np);
  buffer_entries_ = lay_out(b_items, nb);
  const kernels::DType dtype = params.empty() ? kernels::DType::f32 : params.front().value->dtype();
  const kernels::Device device = params.empty() ? kernels::Device::cpu() : params.front().value->device();
  values_ = Tensor::zeros({np}, dtype, device);
  grads_ = Tensor::zeros({np}, dtype, device);
  buffers_ = nb ? Tensor::zeros({nb}, dtype, device) : Tensor();
  // The current values move in (the modules' initialization), then everything is a view.
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor v = view(values_, params_[i]);
    v.copy_from(*params[i].value);
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    Tensor v = view(buffers_, buffer_entries_[i]);
    v.copy_from(*buffers[i].value);
  }
  rebind(root);
}

void ParamArena::rebind(Module& root) {
  auto params = collect_params(root);
  auto buffers = collect_buffers(root);
  if (params.size() != params_.size() || buffers.size() != buffer_entries_.size())
    throw std::logic_error("parameter arena: the module tree changed after the arena was built");
  for (std::size_t i = 0; i < params.size(); ++i) {
    *params[i].value = view(values_, params_[i]);
    *params[i].grad = grads_.defined() ? view(grads_, params_[i]) : Tensor();
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) *buffers[i].value = view(buffers_, buffer_entries_[i]);
}

void ParamArena::to_dtype(Module& root, kernels::DType dtype) {
  values_ = values_.to(dtype);
  if (grads_.defined()) grads_ = grads_.to(dtype);
  if (buffers_.defined()) buffers_ = buffers_.to(dtype);
  rebind(root);
}

void ParamArena::to_device(Module& root, kernels::Device device, bool copy) {
  auto move = [&](Tensor& t) {
    if (!t.defined() || t.device() == device) return;
    t = copy ? t.to(device) : Tensor::empty(t.shape(), t.dtype(), device);
  };
  move(values_);
  move(grads_);
  move(buffers_);
  rebind(root);
}

void ParamArena::drop_grads(Module& root) {
  grads_ = Tensor();
  rebind(root);
}

Tensor ParamArena::replace_values(Module& root, Tensor values) {
  auto layout = [](const Tensor& t) {
    return kernels::shape_str(t.shape()) + " " + kernels::dtype_name(t.dtype()) + " on " + t.device().str();
  };
  if (values.shape() != values_.shape() || values.dtype() != values_.dtype() || values.device() != values_.device())
    throw std::invalid_argument("parameter arena: a replacement value block must be laid out like the live one (" +
                                layout(values_) + "), got " + layout(values));
  std::swap(values, values_);
  try {
    rebind(root);
  } catch (...) {  // the module tree changed: the views stay on the block they were on
    std::swap(values, values_);
    throw;
  }
  return values;
}

std::int64_t ParamArena::num_params() const {
  std::int64_t n = 0;
  for (const auto& e : params_) n += e.numel;
  return n;
}

}  // namespace codistill
