#include "codistill/nn/layers/dropout.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Tensor;

Dropout::Dropout(double p) : p_(p), rng_(0) {
  if (!(p >= 0.0 && p < 1.0))
    throw std::invalid_argument("dropout: p must be in [0, 1), got " + std::to_string(p));
}

void Dropout::init_params(Rng& rng, const std::string& /*init*/) { rng_.reseed(rng.next_u64()); }

void Dropout::queue_changed() {
  // Staging memory and the event belong to the old queue's backend.
  if (mask_copied_) mask_copied_->synchronize();
  mask_copied_.reset();
  staging_ = Tensor();
}

Tensor Dropout::do_forward(const Tensor& x, bool training) {
  active_ = training && p_ > 0.0;
  if (!active_) return x;
  if (mask_copied_) mask_copied_->synchronize();  // the last mask's copy has left the staging memory
  // Staging memory of this shape is kept, also where release_activations dropped the mask
  // (on the CPU the staging memory is the mask itself, and goes with it).
  const bool staged = staging_.defined() && staging_.shape() == x.shape() && staging_.dtype() == x.dtype();
  ensure(mask_, x.shape(), x.dtype());
  ensure(y_, x.shape(), x.dtype());
  if (!staged) staging_ = backend().staging_for(mask_);
  // Drop when a raw 64-bit draw falls below p * 2^64: one integer compare per element, no
  // float conversion. p < 1 keeps the threshold below 2^64. The draws stay sequential (one
  // stream, deterministic); the multiply is a separate vectorizable op.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p_, 64));
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    T* m = staging_.data<T>();
    const std::int64_t n = x.numel();
    for (std::int64_t i = 0; i < n; ++i) m[i] = rng_.next_u64() < threshold ? T(0) : scale;
  });
  queue().copy(mask_, staging_);  // a no-op where the staging memory is the mask
  if (!mask_copied_) mask_copied_ = queue().make_event();
  queue().record(*mask_copied_);
  backend().multiply(x, mask_, y_, queue());
  return y_;
}

Tensor Dropout::do_backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  if (!active_) return dy;
  kernels::check_shape(dy, mask_.shape(), "dropout backward: dy");
  ensure(dx_, dy.shape(), dy.dtype());
  backend().multiply(dy, mask_, dx_, queue());
  return dx_;
}

// Active only in training: the mask and y in forward, dx in backward (the mask's staging
// memory is the mask itself where device memory is host memory).
ActivationBytes Dropout::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  if (!training || p_ <= 0.0) return {0, 0, x};
  return {2 * nn::f32_bytes(x), need_dx ? nn::f32_bytes(x) : 0, x};
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void Dropout::release_activations() {
  // Where the staging memory is the mask itself (the CPU) it goes with the mask; elsewhere it
  // is host memory the next forward fills again after waiting for the last copy.
  if (staging_.same_memory(mask_)) staging_ = kernels::Tensor();
  drop(mask_);
  drop(y_);
  drop(dx_);
}

}  // namespace codistill
