// build_model: a kind-keyed factory of the model architectures (mlp, cnn). The table is a
// function-local constant, not static-initializer registration: adding a kind means adding
// one line to kBuilders.
#include <functional>
#include <map>
#include <stdexcept>

#include "codistill/models/model.hpp"
#include "codistill/nn/conv2d.hpp"
#include "codistill/nn/dropout.hpp"
#include "codistill/nn/flatten.hpp"
#include "codistill/nn/activation.hpp"
#include "codistill/nn/init.hpp"
#include "codistill/nn/linear.hpp"
#include "codistill/nn/maxpool2d.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Appends layers while tracking the per-example shape, so that an impossible architecture
// fails at build time naming the layer, and initializes each layer's parameters from the
// one rng in layer order (deterministic: same seed, same bits).
class Builder {
 public:
  Builder(const ModelConfig& cfg, Rng& rng, Model& model)
      : cfg_(cfg), rng_(rng), model_(model), shape_(cfg.input_shape) {}

  void push(const std::string& name, const std::function<LayerPtr()>& make) {
    try {
      LayerPtr layer = make();
      shape_ = layer->output_shape(shape_);
      layer->init_params(rng_, cfg_.init);
      model_.add(name, std::move(layer));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("model '" + cfg_.kind + "': layer '" + name + "': " + e.what());
    } catch (const kernels::OutOfMemory& e) {
      throw kernels::OutOfMemory("model '" + cfg_.kind + "': layer '" + name + "' (its parameters): " +
                                 e.what());
    }
  }

  void activation() {
    const std::string name = "act" + std::to_string(++acts_);
    if (cfg_.activation == "relu") push(name, [] { return std::make_unique<ReLU>(); });
    else push(name, [] { return std::make_unique<GELU>(); });
  }

  // Hidden fully connected blocks (fcK -> actN -> dropN), then the output layer fc<n>.
  void classifier_head() {
    for (std::int64_t width : cfg_.hidden) {
      const std::int64_t in = features();
      push("fc" + std::to_string(++fcs_), [&] {
        if (width < 1) throw std::invalid_argument("hidden width must be >= 1, got " + std::to_string(width));
        return std::make_unique<Linear>(in, width);
      });
      activation();
      if (cfg_.dropout > 0)
        push("drop" + std::to_string(++drops_), [&] { return std::make_unique<Dropout>(cfg_.dropout); });
    }
    const std::int64_t in = features();
    push("fc" + std::to_string(++fcs_), [&] { return std::make_unique<Linear>(in, cfg_.classes); });
  }

  std::int64_t features() const { return shape_.size() == 1 ? shape_[0] : -1; }
  const kernels::Shape& shape() const { return shape_; }

 private:
  const ModelConfig& cfg_;
  Rng& rng_;
  Model& model_;
  kernels::Shape shape_;
  int acts_ = 0, drops_ = 0, fcs_ = 0;
};

void build_mlp(const ModelConfig& cfg, Rng& rng, Model& model) {
  Builder b(cfg, rng, model);
  b.push("flatten", [] { return std::make_unique<Flatten>(); });
  b.classifier_head();
}

void build_cnn(const ModelConfig& cfg, Rng& rng, Model& model) {
  if (cfg.input_shape.size() != 3)
    throw std::invalid_argument("model 'cnn': input_shape must be [C, H, W], got " +
                                kernels::shape_str(cfg.input_shape));
  Builder b(cfg, rng, model);
  int block = 0;
  for (std::int64_t channels : cfg.channels) {
    ++block;
    const std::int64_t in = b.shape()[0];
    b.push("conv" + std::to_string(block), [&] {
      if (channels < 1) throw std::invalid_argument("channels must be >= 1, got " + std::to_string(channels));
      return std::make_unique<Conv2d>(in, channels, cfg.kernel_size);
    });
    b.activation();
    b.push("pool" + std::to_string(block), [&] { return std::make_unique<MaxPool2d>(cfg.pool); });
  }
  b.push("flatten", [] { return std::make_unique<Flatten>(); });
  b.classifier_head();
}

using BuildFn = void (*)(const ModelConfig&, Rng&, Model&);

const std::map<std::string, BuildFn>& builders() {
  static const std::map<std::string, BuildFn> kBuilders = {{"cnn", build_cnn}, {"mlp", build_mlp}};
  return kBuilders;
}

}  // namespace

std::vector<std::string> model_kinds() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : builders()) out.push_back(name);
  return out;
}

Model build_model(const ModelConfig& cfg, Rng& rng) {
  auto it = builders().find(cfg.kind);
  if (it == builders().end())
    throw std::invalid_argument("unknown model kind '" + cfg.kind + "' (valid: " + join(model_kinds()) + ")");
  // Checked up front so the message names the config key, not the first layer to use it.
  if (cfg.input_shape.empty())
    throw std::invalid_argument("model '" + cfg.kind + "': input_shape is empty (it is filled from the data)");
  for (std::int64_t d : cfg.input_shape)
    if (d < 1)
      throw std::invalid_argument("model '" + cfg.kind + "': input_shape " +
                                  kernels::shape_str(cfg.input_shape) + " has a dimension below 1");
  if (cfg.classes < 1)
    throw std::invalid_argument("model '" + cfg.kind + "': classes must be >= 1, got " + std::to_string(cfg.classes));
  if (cfg.activation != "relu" && cfg.activation != "gelu")
    throw std::invalid_argument("unknown activation '" + cfg.activation + "' (valid: gelu, relu)");
  if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0))
    throw std::invalid_argument("model '" + cfg.kind + "': dropout must be in [0, 1), got " + std::to_string(cfg.dropout));
  nn::check_init_kind(cfg.init);

  Model model;
  model.set_input_shape(cfg.input_shape);
  it->second(cfg, rng, model);
  model.finalize();
  return model;
}

}  // namespace codistill
