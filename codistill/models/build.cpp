// build_model: a kind-keyed factory of the model architectures (mlp, cnn, resnet, gpt, and layers:
// the list from the config, codistill/models/layers_model.cpp). The table is a
// function-local constant, not static-initializer registration: adding a kind means adding
// one line to kBuilders.
#include <functional>
#include <map>
#include <stdexcept>

#include "codistill/models/gpt_model.hpp"
#include "codistill/models/layers_model.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/avgpool.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/init.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
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
      // A container's leaves in tree order (a residual block: body, then shortcut).
      layer->init_params(rng_, cfg_.init);
      visit_modules(*layer, [&](const std::string&, Module& m) { m.init_params(rng_, cfg_.init); });
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
    else push(name, [this] { return std::make_unique<GELU>(cfg_.gelu == "tanh"); });
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

// A 3x3 convolution without bias (the batch normalization after it has one), 'same'
// padding at stride 1, halving at stride 2.
ModulePtr conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return std::make_unique<Conv2d>(in, out, 3, stride, 1, /*bias=*/false);
}

ModulePtr activation_of(const ModelConfig& cfg) {
  if (cfg.activation == "relu") return std::make_unique<ReLU>();
  return std::make_unique<GELU>(cfg.gelu == "tanh");
}

// One basic block (He et al. 2016): conv3x3(stride) -> bn -> act -> conv3x3 -> bn, plus the
// shortcut: the identity, or a projection (1x1 conv at the stride, bn) where the width or
// the resolution changes. The activation after the sum is the next module of the model.
ModulePtr basic_block(const ModelConfig& cfg, std::int64_t in, std::int64_t width, std::int64_t stride) {
  auto body = std::make_unique<Sequential>();
  body->add("conv1", conv3x3(in, width, stride));
  body->add("bn1", std::make_unique<BatchNorm>(width));
  body->add("act1", activation_of(cfg));
  body->add("conv2", conv3x3(width, width, 1));
  body->add("bn2", std::make_unique<BatchNorm>(width));
  if (stride == 1 && in == width) return std::make_unique<Residual>(std::move(body));
  auto shortcut = std::make_unique<Sequential>();
  shortcut->add("conv", std::make_unique<Conv2d>(in, width, 1, stride, 0, /*bias=*/false));
  shortcut->add("bn", std::make_unique<BatchNorm>(width));
  return std::make_unique<Residual>(std::move(body), std::move(shortcut));
}

// ResNet for small images (the CIFAR family of He et al.: 6n+2 layers with n = blocks):
// a 3x3 stem of channels[0], then one stage per entry of channels, `blocks` basic blocks
// each, every stage after the first halving the resolution; global average pooling and
// the classifier head (hidden layers, if any, then the output layer). channels [16, 32,
// 64] with blocks 1, 2, 3 give ResNet-8, -14, -20.
void build_resnet(const ModelConfig& cfg, Rng& rng, Model& model) {
  if (cfg.input_shape.size() != 3)
    throw std::invalid_argument("model 'resnet': input_shape must be [C, H, W], got " +
                                kernels::shape_str(cfg.input_shape));
  if (cfg.blocks < 1) throw std::invalid_argument("model 'resnet': blocks must be >= 1, got " + std::to_string(cfg.blocks));
  Builder b(cfg, rng, model);
  const std::int64_t in = b.shape()[0], stem = cfg.channels.at(0);
  b.push("stem", [&] { return conv3x3(in, stem, 1); });
  b.push("stem_bn", [&] { return std::make_unique<BatchNorm>(stem); });
  b.activation();
  for (std::size_t s = 0; s < cfg.channels.size(); ++s) {
    const std::int64_t width = cfg.channels[s];
    for (std::int64_t k = 0; k < cfg.blocks; ++k) {
      const std::int64_t from = b.shape()[0], stride = (s > 0 && k == 0) ? 2 : 1;
      const std::string name = "stage" + std::to_string(s + 1) + "_block" + std::to_string(k + 1);
      b.push(name, [&] {
        if (width < 1) throw std::invalid_argument("channels must be >= 1, got " + std::to_string(width));
        ModulePtr block = basic_block(cfg, from, width, stride);
        block->mark_block();  // the unit train.recompute: blocks recomputes
        return block;
      });
      b.activation();
    }
  }
  b.push("pool", [] { return std::make_unique<GlobalAvgPool>(); });
  b.classifier_head();
  // Every image layer here can switch to channels-last (convolutions, batch norms, the
  // pooling; the rest is elementwise or after the pooling). The input comes NCHW from the
  // data: the same bytes as NHWC when it has one channel; with more, the model stays NCHW.
  model.set_channels_last_allowed(in == 1);
}

using BuildFn = void (*)(const ModelConfig&, Rng&, Model&);

const std::map<std::string, BuildFn>& builders() {
  static const std::map<std::string, BuildFn> kBuilders = {
      {"cnn", build_cnn}, {"gpt", build_gpt}, {"layers", build_layers}, {"mlp", build_mlp}, {"resnet", build_resnet}};
  return kBuilders;
}

}  // namespace

std::vector<std::string> model_kinds() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : builders()) out.push_back(name);
  return out;
}

Model build_model(const ModelConfig& given, Rng& rng) {
  // A gpt derives input_shape ([seq_len]) and classes (the vocabulary) from its own keys.
  const ModelConfig cfg = resolve_gpt(given);
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
  if (cfg.gelu != "erf" && cfg.gelu != "tanh")
    throw std::invalid_argument("unknown gelu form '" + cfg.gelu + "' (valid: erf, tanh)");
  if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0))
    throw std::invalid_argument("model '" + cfg.kind + "': dropout must be in [0, 1), got " + std::to_string(cfg.dropout));
  nn::check_init_kind(cfg.init);

  Model model;
  model.set_input_shape(cfg.input_shape);
  it->second(cfg, rng, model);
  model.finalize();
  model.set_memory_format(cfg.memory_format);
  return model;
}

}  // namespace codistill
