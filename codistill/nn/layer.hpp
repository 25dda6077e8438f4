#pragma once
// A layer with explicit forward and backward (no autograd): forward caches what its
// backward needs; backward takes dL/dy, accumulates dL/dparams into the grads and returns
// dL/dx. Tensors are float32 for training and float64 for gradient checks; a layer works
// in the dtype of its parameters (see Layer::to_dtype).
//
// Devices: a layer lives on the CPU until to_device moves it. forward/backward then take
// inputs on that device and dispatch on it: the CPU path is the kernels/cpu ops, the CUDA
// path the kernels/cuda ops (float32 only), queued on the stream of the layer's
// kernels::cuda::Context without waiting for them (results are read through a
// stream-ordered copy, see codistill/util/device_memory.hpp).
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
#include "kernels/cuda/context.hpp"
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

  // Moves parameters and grads to `device` (CUDA: float32 parameters only, float64 throws)
  // and runs the layer's CUDA ops on ctx (device, stream, TF32). Waits for the copies.
  virtual void to_device(kernels::Device device, const kernels::cuda::Context& ctx = {});
  // A forward-only placement for a copy whose parameter values the caller writes itself
  // (a teacher staged through pinned memory): parameters become uninitialized tensors on
  // `device`, grads are released (backward then throws).
  void to_device_uninitialized(kernels::Device device, const kernels::cuda::Context& ctx);
  kernels::Device device() const { return device_; }
  const kernels::cuda::Context& cuda_context() const { return ctx_; }

  // Zeroes the parameter gradients. On the CPU a memset. On CUDA nothing is written: the
  // next backward overwrites the grads instead of adding to them (same values, one pass
  // less, and no memset on another stream to order against the layer's stream).
  void zero_grad();

 protected:
  // backward's accumulate flag: true, except for the first backward after zero_grad on CUDA.
  bool accumulate_grads();
  // Throws std::logic_error when the grads were released (to_device_uninitialized).
  void require_grads(const char* layer);

  kernels::cpu::Impl impl_ = kernels::cpu::Impl::fast;
  kernels::Device device_{};
  kernels::cuda::Context ctx_{};

 private:
  bool overwrite_grads_ = false;
};

using LayerPtr = std::unique_ptr<Layer>;

}  // namespace codistill
