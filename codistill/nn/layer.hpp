#pragma once
// A layer with explicit forward and backward (no autograd): forward caches what its
// backward needs; backward takes dL/dy, accumulates dL/dparams into the grads and returns
// dL/dx. Tensors are float32 for training and float64 for gradient checks; a layer works
// in the dtype of its parameters (see Layer::to_dtype).
//
// Buffers: forward and backward return tensors that share the layer's own output/gradient
// buffers (reused while the shape is unchanged, so the training loop does not allocate);
// they stay valid until the layer's next forward/backward. forward keeps a reference to
// its input where backward needs it, so the input must not change before backward.
// Model::forward clones the logits it returns.
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/impl.hpp"
#include "kernels/tensor.hpp"

namespace codistill {

class Rng;

// A named trainable tensor and its gradient, both owned by the layer.
struct Param {
  std::string name;  // local name within the layer: "weight", "bias"
  kernels::Tensor* value;
  kernels::Tensor* grad;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;

  // training = true enables dropout and caches activations for backward.
  virtual kernels::Tensor forward(const kernels::Tensor& x, bool training) = 0;
  // need_dx = false lets the first layer skip computing the input gradient.
  virtual kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true) = 0;

  virtual std::vector<Param> params() { return {}; }
  // Output shape for an input shape without the batch dimension ([C,H,W] or [F]).
  virtual kernels::Shape output_shape(const kernels::Shape& input) const = 0;
  // Re-initializes parameters from rng (init: kaiming_uniform | kaiming_normal | xavier_uniform).
  virtual void init_params(Rng& /*rng*/, const std::string& /*init*/) {}
  // Converts parameters and grads to dtype (f32 for training, f64 for gradient checks).
  virtual void to_dtype(kernels::DType /*dtype*/) {}
  // The layer's own random stream (dropout masks), or null. Its state belongs in a
  // checkpoint so that a resumed run draws the same masks (Model::rngs lists them).
  virtual Rng* rng() { return nullptr; }
  // Which implementation the ops use (reference for tests, fast for training).
  void set_impl(kernels::cpu::Impl impl) { impl_ = impl; }

 protected:
  kernels::cpu::Impl impl_ = kernels::cpu::Impl::fast;
};

using LayerPtr = std::unique_ptr<Layer>;

}  // namespace codistill
