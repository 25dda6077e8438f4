#pragma once
// A model: an ordered list of named layers. Parameter paths are "<layer>/<param>", e.g.
// "fc1/weight" [out, in] — the names checkpoints use (DESIGN.md section 5).
// A model lives on the CPU until to_device moves it; on CUDA all its layers run on one
// stream (cuda_context()), queued without waiting: synchronize() waits for them.
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

  // x: [B, C, H, W] (or [B, F]) -> logits [B, classes], x and logits on the model's device.
  // CPU: the logits are a copy the caller keeps. CUDA: they are the last layer's own
  // buffer, valid until this model's next forward (no allocation and no copy per step;
  // a copy on another stream would race the model's stream anyway).
  kernels::Tensor forward(const kernels::Tensor& x, bool training);
  // dlogits: [B, classes]; accumulates parameter grads. The input gradient is not computed:
  // layers before the first layer with parameters are skipped, and that layer runs with
  // need_dx = false.
  void backward(const kernels::Tensor& dlogits);
  // CPU: zeroes every grad. CUDA: the next backward overwrites them (Layer::zero_grad).
  void zero_grad();

  std::vector<NamedParam> params();
  std::int64_t num_params();
  // Hash (FNV-1a, hex) of the ordered parameter paths and shapes: two models with equal
  // fingerprints can exchange checkpoints.
  std::string fingerprint();
  void to_dtype(kernels::DType dtype);
  void set_impl(kernels::cpu::Impl impl);

  // Moves parameters and grads to `device` (CUDA: float32 only) and runs every layer on
  // ctx's stream. On CUDA a Linear directly followed by a ReLU or GELU applies the
  // activation itself (one fused pass) and the activation layer passes through; moving
  // back to the CPU undoes the fusion. Waits for the copies.
  void to_device(kernels::Device device, const kernels::cuda::Context& ctx = {});
  // Forward-only placement (a teacher): parameters become uninitialized device tensors
  // that the caller fills (Layer::to_device_uninitialized), grads are released.
  void to_device_uninitialized(kernels::Device device, const kernels::cuda::Context& ctx);
  kernels::Device device() const { return device_; }
  const kernels::cuda::Context& cuda_context() const { return ctx_; }
  // Host waits for everything queued on the model's stream (nothing on the CPU).
  void synchronize() const;
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
  kernels::Device device_{};
  kernels::cuda::Context ctx_{};
  // Index of the first layer with parameters; none yet: -1.
  std::size_t first_param_layer_ = static_cast<std::size_t>(-1);
};

// Builds the model of cfg.kind ("mlp" | "cnn"), initialized from rng. cfg.input_shape and
// cfg.classes must be filled (from the data). Unknown kinds throw std::invalid_argument
// listing the valid ones; impossible shapes throw with the layer that cannot be built.
Model build_model(const ModelConfig& cfg, Rng& rng);
std::vector<std::string> model_kinds();

}  // namespace codistill
