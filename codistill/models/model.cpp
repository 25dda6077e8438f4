#include "codistill/models/model.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>

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
  for (auto& [name, layer] : layers_)
    for (auto& p : layer->params()) p.grad->zero();
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
