#include "codistill/models/model.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>

#include "codistill/nn/activation.hpp"
#include "codistill/nn/linear.hpp"
#include "kernels/cuda/context.hpp"

namespace codistill {

using kernels::Tensor;

void Model::add(std::string name, LayerPtr layer) {
  if (!layer) throw std::invalid_argument("Model::add: null layer '" + name + "'");
  if (name.empty() || name.find('/') != std::string::npos)
    throw std::invalid_argument("Model::add: layer name '" + name + "' must be non-empty without '/'");
  for (const auto& [n, l] : layers_)
    if (n == name) throw std::invalid_argument("Model::add: duplicate layer name '" + name + "'");
  if (first_param_layer_ == static_cast<std::size_t>(-1) && !layer->params().empty())
    first_param_layer_ = layers_.size();
  layers_.emplace_back(std::move(name), std::move(layer));
}

Tensor Model::forward(const Tensor& x, bool training) {
  if (layers_.empty()) throw std::logic_error("Model::forward: the model has no layers");
  Tensor h = x;
  for (auto& [name, layer] : layers_) {
    try {
      h = layer->forward(h, training);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("layer '" + name + "': " + e.what());
    }
  }
  // The last layer's buffer is reused by the next forward; a caller that keeps logits
  // (ensembles, churn between two checkpoints in one model) must not see them change.
  // On CUDA the caller copies what it keeps (see the header).
  if (device_.is_cuda()) return h;
  return h.clone();
}

void Model::backward(const Tensor& dlogits) {
  if (first_param_layer_ >= layers_.size()) return;  // nothing to train
  Tensor g = dlogits;
  for (std::size_t i = layers_.size(); i-- > first_param_layer_;) {
    auto& [name, layer] = layers_[i];
    try {
      g = layer->backward(g, /*need_dx=*/i > first_param_layer_);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("layer '" + name + "' backward: " + e.what());
    }
  }
}

void Model::zero_grad() {
  for (auto& [name, layer] : layers_) layer->zero_grad();
}

std::vector<NamedParam> Model::params() {
  std::vector<NamedParam> out;
  for (auto& [name, layer] : layers_)
    for (auto& p : layer->params()) out.push_back({name + "/" + p.name, p.value, p.grad});
  return out;
}

std::int64_t Model::num_params() {
  std::int64_t n = 0;
  for (auto& p : params()) n += p.value->numel();
  return n;
}

std::string Model::fingerprint() {
  // FNV-1a 64 over "path:[d0, d1];" for each parameter in order (shape as shape_str).
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto& p : params()) {
    for (unsigned char c : p.path + ":" + kernels::shape_str(p.value->shape()) + ";") {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("{:016x}", h);
}

void Model::to_dtype(kernels::DType dtype) {
  for (auto& [name, layer] : layers_) layer->to_dtype(dtype);
}

namespace {

// The activation that layer `next` computes and can hand to a Linear before it, else none.
kernels::cuda::Activation fusable(Layer* next, bool on) {
  auto* act = dynamic_cast<ActivationLayer*>(next);
  if (!act) return kernels::cuda::Activation::none;
  act->set_passthrough(on);
  return act->activation();
}

// Linear -> ReLU/GELU pairs fused on CUDA (one bias + activation pass), undone elsewhere.
void set_fusion(std::vector<std::pair<std::string, LayerPtr>>& layers, bool on) {
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) {
    auto* linear = dynamic_cast<Linear*>(layers[i].second.get());
    if (!linear) continue;
    const auto act = fusable(layers[i + 1].second.get(), on);
    linear->set_fused_activation(on ? act : kernels::cuda::Activation::none);
  }
}

}  // namespace

void Model::to_device(kernels::Device device, const kernels::cuda::Context& ctx) {
  // Checked for all layers first, so that a refusal leaves the whole model where it was.
  if (device.is_cuda())
    for (auto& p : params())
      if (p.value->dtype() != kernels::DType::f32)
        throw std::invalid_argument("parameter '" + p.path + "' is " + kernels::dtype_name(p.value->dtype()) +
                                    "; CUDA layers run in float32 only (to_dtype(float32) first)");
  for (auto& [name, layer] : layers_) {
    try {
      layer->to_device(device, ctx);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("layer '" + name + "': " + e.what());
    }
  }
  device_ = device;
  ctx_ = ctx;
  ctx_.device = device.is_cuda() ? device.index : 0;
  set_fusion(layers_, device.is_cuda());
}

void Model::to_device_uninitialized(kernels::Device device, const kernels::cuda::Context& ctx) {
  for (auto& [name, layer] : layers_) layer->to_device_uninitialized(device, ctx);
  device_ = device;
  ctx_ = ctx;
  ctx_.device = device.is_cuda() ? device.index : 0;
  set_fusion(layers_, device.is_cuda());
}

void Model::synchronize() const {
  if (device_.is_cuda()) kernels::cuda::stream_synchronize(ctx_);
}

void Model::set_impl(kernels::cpu::Impl impl) {
  for (auto& [name, layer] : layers_) layer->set_impl(impl);
}

std::vector<std::pair<std::string, Rng*>> Model::rngs() {
  std::vector<std::pair<std::string, Rng*>> out;
  for (auto& [name, layer] : layers_)
    if (Rng* r = layer->rng()) out.emplace_back(name, r);
  return out;
}

std::string Model::summary() {
  std::string out = fmt::format("{:<10} {:<10} {:<18} {:>10}\n", "layer", "kind", "output", "params");
  kernels::Shape shape = input_shape_;
  if (!shape.empty()) out += fmt::format("{:<10} {:<10} {:<18} {:>10}\n", "input", "", kernels::shape_str(shape), 0);
  for (auto& [name, layer] : layers_) {
    std::int64_t n = 0;
    for (auto& p : layer->params()) n += p.value->numel();
    std::string shown = "?";
    if (!shape.empty()) {
      shape = layer->output_shape(shape);
      shown = kernels::shape_str(shape);
    }
    out += fmt::format("{:<10} {:<10} {:<18} {:>10}\n", name, layer->kind(), shown, n);
  }
  out += fmt::format("total parameters {}, fingerprint {}", num_params(), fingerprint());
  return out;
}

}  // namespace codistill
