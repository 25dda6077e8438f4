#pragma once
// A model: an ordered list of named layers. Parameter paths are "<layer>/<param>", e.g.
// "fc1/weight" [out, in] — the names checkpoints use (DESIGN.md section 5).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/nn/layer.hpp"

namespace codistill {

struct NamedParam {
  std::string path;  // "fc1/weight"
  kernels::Tensor* value;
  kernels::Tensor* grad;
};

class Model {
 public:
  void add(std::string name, LayerPtr layer);

  // x: [B, C, H, W] (or [B, F]) -> logits [B, classes]
  kernels::Tensor forward(const kernels::Tensor& x, bool training);
  // dlogits: [B, classes]; accumulates parameter grads. The input gradient is not computed:
  // layers before the first layer with parameters are skipped, and that layer runs with
  // need_dx = false.
  void backward(const kernels::Tensor& dlogits);
  void zero_grad();

  std::vector<NamedParam> params();
  std::int64_t num_params();
  // Hash (FNV-1a, hex) of the ordered parameter paths and shapes: two models with equal
  // fingerprints can exchange checkpoints.
  std::string fingerprint();
  void to_dtype(kernels::DType dtype);
  void set_impl(kernels::cpu::Impl impl);
  std::string summary();  // one line per layer: name, kind, output shape, params

  // Input shape without the batch dimension (set by build_model; summary() uses it).
  void set_input_shape(kernels::Shape shape) { input_shape_ = std::move(shape); }
  const kernels::Shape& input_shape() const { return input_shape_; }
  // Layers with their own random stream (dropout), by layer name, in layer order. A
  // checkpoint saves rng->state() of each and a resume calls rng->set_state(...).
  std::vector<std::pair<std::string, Rng*>> rngs();

  const std::vector<std::pair<std::string, LayerPtr>>& layers() const { return layers_; }

 private:
  std::vector<std::pair<std::string, LayerPtr>> layers_;
  kernels::Shape input_shape_;
  // Index of the first layer with parameters; none yet: -1.
  std::size_t first_param_layer_ = static_cast<std::size_t>(-1);
};

// Builds the model of cfg.kind ("mlp" | "cnn"), initialized from rng. cfg.input_shape and
// cfg.classes must be filled (from the data). Unknown kinds throw std::invalid_argument
// listing the valid ones; impossible shapes throw with the layer that cannot be built.
Model build_model(const ModelConfig& cfg, Rng& rng);
std::vector<std::string> model_kinds();

}  // namespace codistill
