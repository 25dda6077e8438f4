// The `layers` model kind: one module per entry of model.layers (see layers_model.hpp).
// Each entry's shape requirement is checked here, before the layer is made, so that the
// message says what to change in the config rather than what a layer's constructor found.
#include "codistill/models/layers_model.hpp"

#include <map>
#include <stdexcept>

#include "codistill/util/config_error.hpp"
#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/avgpool.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/layernorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {
namespace {

using kernels::Shape;
using kernels::shape_str;

// Where an entry is ("model.layers[4].residual.layers[1]") and what it gets.
struct Site {
  std::string path;
  const LayerSpec& spec;
  const Shape& in;
};

[[noreturn]] void fail(const Site& at, const std::string& problem) {
  throw ConfigError(at.path, "", 0, at.spec.type + " gets input " + shape_str(at.in) + ": " + problem);
}

void need_image(const Site& at) {
  if (at.in.size() != 3)
    fail(at, "it needs an image [C, H, W]" +
                 std::string(at.in.size() == 1 ? " (it cannot follow a flatten, a linear or a global_avg_pool)" : ""));
}

// Output size of a window of `window` at `stride` over `size` padded by `pad` on each side.
std::int64_t slide(std::int64_t size, std::int64_t window, std::int64_t stride, std::int64_t pad) {
  return (size + 2 * pad - window) / stride + 1;
}

void need_window_fits(const Site& at, const char* what, std::int64_t window, std::int64_t pad) {
  const std::int64_t h = at.in[1] + 2 * pad, w = at.in[2] + 2 * pad;
  if (window > h || window > w)
    fail(at, std::string(what) + " " + std::to_string(window) + " is larger than the input's " +
                 (pad ? "padded " : "") + std::to_string(h) + "x" + std::to_string(w) + " plane" +
                 (pad ? " (padding " + std::to_string(pad) + ")" : ""));
}

class LayerBuilder {
 public:
  LayerBuilder(const ModelConfig& cfg, Rng& rng) : cfg_(cfg), rng_(rng) {}

  // Makes the entry's module and advances `shape` to its output.
  ModulePtr make(const Site& at, Shape& shape) {
    const LayerSpec& s = at.spec;
    const std::string& t = s.type;
    ModulePtr m;
    try {
      m = construct(at, s, t);
    } catch (const std::invalid_argument& e) {
      fail(at, e.what());  // a constructor's own check (the schema leaves few to fail)
    }
    try {
      shape = m->output_shape(at.in);
    } catch (const std::invalid_argument& e) {
      fail(at, e.what());  // a case the checks above do not foresee, still named
    }
    for (auto d : shape)
      if (d < 1) fail(at, "its output " + shape_str(shape) + " would be empty");
    return m;
  }

  ModulePtr construct(const Site& at, const LayerSpec& s, const std::string& t) {
    ModulePtr m;
    if (t == "conv2d") {
      need_image(at);
      const std::int64_t k = s.integer("kernel"), stride = s.integer("stride"), pad = s.integer("padding");
      need_window_fits(at, "kernel", k, pad);
      m = std::make_unique<Conv2d>(at.in[0], s.integer("out_channels"), k, stride, pad, s.flag("bias"));
    } else if (t == "maxpool") {
      need_image(at);
      need_window_fits(at, "window", s.integer("window"), 0);
      m = std::make_unique<MaxPool2d>(s.integer("window"), s.integer("stride"));
    } else if (t == "global_avg_pool") {
      need_image(at);
      m = std::make_unique<GlobalAvgPool>();
    } else if (t == "linear") {
      if (at.in.size() != 1)
        fail(at, "it needs a flat input [F]; put a flatten (or a global_avg_pool) before it");
      m = std::make_unique<Linear>(at.in[0], s.integer("out"), s.flag("bias"));
    } else if (t == "batchnorm") {
      if (at.in.size() != 1 && at.in.size() != 3)
        fail(at, "it normalizes the channels of [C, H, W] or the features of [F]");
      m = std::make_unique<BatchNorm>(at.in[0], s.number("eps"), s.number("momentum"));
    } else if (t == "layernorm") {
      m = std::make_unique<LayerNorm>(at.in.back(), s.number("eps"));
    } else if (t == "dropout") {
      m = std::make_unique<Dropout>(s.number("p"));
    } else if (t == "flatten") {
      m = std::make_unique<Flatten>();
    } else if (t == "relu") {
      m = std::make_unique<ReLU>();
    } else if (t == "gelu") {
      m = std::make_unique<GELU>(cfg_.gelu == "tanh");
    } else if (t == "residual") {
      m = residual(at);
      m->mark_block();  // the unit train.recompute: blocks recomputes
    } else {
      // The schema and this list disagree: a bug, not a config problem.
      throw std::logic_error("build_layers: no builder for layer type '" + t + "'");
    }
    return m;
  }

  // The entries of a list as the children of a Sequential; `shape` goes from the list's
  // input to its output.
  std::unique_ptr<Sequential> sequence(const std::vector<LayerSpec>& specs, const std::string& path, Shape& shape) {
    auto seq = std::make_unique<Sequential>();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const Shape in = shape;
      const Site at{path + "[" + std::to_string(i) + "]", specs[i], in};
      seq->add(std::to_string(i) + "_" + specs[i].type, make(at, shape));
    }
    return seq;
  }

  void init(Module& m) {
    m.init_params(rng_, cfg_.init);
    visit_modules(m, [&](const std::string&, Module& child) { child.init_params(rng_, cfg_.init); });
  }

 private:
  // body(x) + shortcut(x): the given shortcut list, else the identity where the body keeps
  // the shape, else a projection (ResNet's option B): a bias-free 1x1 convolution at the
  // stride that gives the body's resolution, then a batchnorm; for flat inputs a bias-free
  // linear.
  ModulePtr residual(const Site& at) {
    const std::string base = at.path + ".residual";
    Shape body_out = at.in;
    auto body = sequence(at.spec.layers, base + ".layers", body_out);
    if (!at.spec.shortcut.empty()) {
      Shape short_out = at.in;
      auto shortcut = sequence(at.spec.shortcut, base + ".shortcut", short_out);
      if (short_out != body_out)
        fail(at, "its layers give " + shape_str(body_out) + " but its shortcut gives " + shape_str(short_out));
      return std::make_unique<Residual>(std::move(body), std::move(shortcut));
    }
    if (body_out == at.in) return std::make_unique<Residual>(std::move(body));
    auto shortcut = std::make_unique<Sequential>();
    if (at.in.size() == 1 && body_out.size() == 1) {
      shortcut->add("0_linear", std::make_unique<Linear>(at.in[0], body_out[0], /*bias=*/false));
    } else if (at.in.size() == 3 && body_out.size() == 3) {
      std::int64_t stride = 0;
      for (std::int64_t s = 1; s <= std::max(at.in[1], at.in[2]) && !stride; ++s)
        if (slide(at.in[1], 1, s, 0) == body_out[1] && slide(at.in[2], 1, s, 0) == body_out[2]) stride = s;
      if (!stride)
        fail(at, "its layers give " + shape_str(body_out) +
                     ", which no strided 1x1 projection of the input gives; write a shortcut list");
      shortcut->add("0_conv2d", std::make_unique<Conv2d>(at.in[0], body_out[0], 1, stride, 0, /*bias=*/false));
      shortcut->add("1_batchnorm", std::make_unique<BatchNorm>(body_out[0]));
    } else {
      fail(at, "its layers give " + shape_str(body_out) +
                   ", of another rank than the input: the identity cannot be added to it; write a shortcut list");
    }
    return std::make_unique<Residual>(std::move(body), std::move(shortcut));
  }

  const ModelConfig& cfg_;
  Rng& rng_;
};

}  // namespace

void build_layers(const ModelConfig& cfg, Rng& rng, Model& model) {
  if (cfg.layers.empty())
    throw ConfigError("model.layers", "", 0, "model.kind layers needs a non-empty list of layers");
  LayerBuilder b(cfg, rng);
  Shape shape = cfg.input_shape;
  for (std::size_t i = 0; i < cfg.layers.size(); ++i) {
    const Shape in = shape;
    const Site at{"model.layers[" + std::to_string(i) + "]", cfg.layers[i], in};
    const std::string name = std::to_string(i) + "_" + cfg.layers[i].type;
    try {
      ModulePtr m = b.make(at, shape);
      b.init(*m);
      model.add(name, std::move(m));
    } catch (const kernels::OutOfMemory& e) {
      throw kernels::OutOfMemory("model 'layers': " + at.path + " (" + name + ", its parameters): " + e.what());
    }
  }
  if (shape != Shape{cfg.classes}) {
    const std::size_t last = cfg.layers.size() - 1;
    throw ConfigError("model.layers[" + std::to_string(last) + "]", "", 0,
                      "the last layer (" + cfg.layers[last].type + ") gives " + shape_str(shape) +
                          "; the model must end in [" + std::to_string(cfg.classes) +
                          "], one logit per class of the data (e.g. end with a linear: {out: " +
                          std::to_string(cfg.classes) + "})");
  }
  model.set_fingerprint_modules(true);
}

}  // namespace codistill
