#include "codistill/nn/layers/batchnorm.hpp"

#include <stdexcept>
#include <string>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

BatchNorm::BatchNorm(std::int64_t channels, double eps, double momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  if (channels < 1) throw std::invalid_argument("batchnorm: channels must be >= 1, got " + std::to_string(channels));
  kernels::BatchNormShape{1, channels, 2, eps, momentum}.validate(true);  // eps and momentum
  gamma_ = Tensor::full({channels}, 1.0);
  beta_ = Tensor::zeros({channels});
  dgamma_ = Tensor::zeros({channels});
  dbeta_ = Tensor::zeros({channels});
  mean_ = Tensor::zeros({channels});
  var_ = Tensor::full({channels}, 1.0);
}

Shape BatchNorm::output_shape(const Shape& input) const {
  if (input.empty() || input.size() > 3 || input[0] != channels_)
    throw std::invalid_argument("batchnorm: expected input [" + std::to_string(channels_) + "], [" +
                                std::to_string(channels_) + ", L] or [" + std::to_string(channels_) +
                                ", H, W], got " + kernels::shape_str(input));
  return input;
}

void BatchNorm::set_fused_activation(kernels::Activation act) {
  if (act != kernels::Activation::none && act != kernels::Activation::relu)
    throw std::invalid_argument(std::string("batchnorm: only relu can be fused, got ") + kernels::activation_name(act));
  fused_ = act;
}

void BatchNorm::init_params(Rng& /*rng*/, const std::string& /*init*/) {
  gamma_.fill(1.0);
  beta_.fill(0.0);
}

kernels::BatchNormShape BatchNorm::shape_of(const Tensor& x) const {
  if (x.ndim() < 2 || x.ndim() > 4 || x.dim(1) != channels_)
    throw std::invalid_argument("batchnorm: expected input [B, " + std::to_string(channels_) + ", ...], got " +
                                kernels::shape_str(x.shape()));
  std::int64_t spatial = 1;
  for (int d = 2; d < x.ndim(); ++d) spatial *= x.dim(d);
  if (channels_last_ && x.ndim() == 4) return {x.dim(0) * spatial, channels_, 1, eps_, momentum_};
  return {x.dim(0), channels_, spatial, eps_, momentum_};
}

// The sums to host memory (staging: itself on the CPU), summed over the ranks, back. The
// staging tensor is kept (one per layer, not one per call) and the copy back is waited
// for, so that it is never reused while a copy from it is queued.
void BatchNorm::all_reduce(Tensor& sums) {
  kernels::Queue& q = queue();
  if (staged_for_ != sums.raw()) {  // sums_ (re)allocated, or another device
    host_sums_ = backend().staging_for(sums);
    staged_for_ = sums.raw();
  }
  q.copy(host_sums_, sums);
  q.synchronize();
  group_sum_->all_reduce_sum({host_sums_.data<double>(), static_cast<std::size_t>(host_sums_.numel())});
  q.copy(sums, host_sums_);
  q.synchronize();
}

Tensor BatchNorm::do_forward(const Tensor& x, bool training) {
  const auto s = shape_of(x);
  synced_ = training && group_sum_;
  if (synced_) {  // one value per channel on this rank is fine: the group's count is checked
    x_ = x;
    trained_ = true;
    ensure(y_, x.shape(), x.dtype());
    ensure(save_mean_, {channels_}, x.dtype());
    ensure(save_invstd_, {channels_}, x.dtype());
    ensure(sums_, {2 * channels_ + 1}, kernels::DType::f64);
    backend().batchnorm_sums(x, nullptr, mean_, nullptr, sums_, s, queue());
    all_reduce(sums_);
    backend().batchnorm_forward_synced(x, gamma_, beta_, mean_, var_, sums_, y_, save_mean_, save_invstd_, s, queue());
    if (fused_ != kernels::Activation::none) backend().activation_forward(y_, y_, fused_, queue());  // in place
    return y_;
  }
  if (training && s.per_channel() < 2)
    throw std::invalid_argument("batchnorm: training needs more than one value per channel, got input " +
                                kernels::shape_str(x.shape()));
  x_ = x;
  trained_ = training;
  ensure(y_, x.shape(), x.dtype());
  ensure(save_mean_, {channels_}, x.dtype());
  ensure(save_invstd_, {channels_}, x.dtype());
  if (fused_ != kernels::Activation::none)
    backend().batchnorm_activation_forward(x, gamma_, beta_, mean_, var_, y_, save_mean_, save_invstd_, training,
                                           fused_, s, queue());
  else
    backend().batchnorm_forward(x, gamma_, beta_, mean_, var_, y_, save_mean_, save_invstd_, training, s, queue());
  return y_;
}

Tensor BatchNorm::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("batchnorm: backward before forward");
  if (!dgamma_.defined()) throw std::logic_error("batchnorm: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, x_.shape(), "batchnorm backward: dy");
  if (need_dx) ensure(dx_, x_.shape(), x_.dtype());
  if (synced_) {
    const Tensor* dz = &dy;
    if (fused_ != kernels::Activation::none) {  // the activation's backward first (y_ is its output)
      ensure(dpre_, x_.shape(), x_.dtype());
      backend().activation_backward(y_, dy, dpre_, fused_, queue());
      dz = &dpre_;
    }
    ensure(local_sums_, {2 * channels_ + 1}, kernels::DType::f64);
    backend().batchnorm_sums(x_, dz, save_mean_, &save_invstd_, local_sums_, shape_of(x_), queue());
    queue().copy(sums_, local_sums_);
    all_reduce(sums_);
    backend().batchnorm_backward_synced(x_, gamma_, save_mean_, save_invstd_, *dz, local_sums_, sums_,
                                        need_dx ? &dx_ : nullptr, dgamma_, dbeta_, shape_of(x_), queue());
    return need_dx ? dx_ : Tensor{};
  }
  if (fused_ != kernels::Activation::none)
    backend().batchnorm_activation_backward(x_, y_, gamma_, save_mean_, save_invstd_, dy, need_dx ? &dx_ : nullptr,
                                            dgamma_, dbeta_, trained_, fused_, shape_of(x_), queue());
  else
    backend().batchnorm_backward(x_, gamma_, save_mean_, save_invstd_, dy, need_dx ? &dx_ : nullptr, dgamma_,
                                 dbeta_, trained_, shape_of(x_), queue());
  return need_dx ? dx_ : Tensor{};
}

// y, the saved mean and inverse deviation per channel, dx; synchronized statistics add
// their float64 sums and, with a fused activation, dpre.
ActivationBytes BatchNorm::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = Module::plan_activations(x, training, need_dx);
  a.forward += nn::f32_bytes(2 * channels_);
  if (training && group_sum_) {
    a.forward += (2 * channels_ + 1) * 8;
    a.backward += (2 * channels_ + 1) * 8;
    if (fused_ != kernels::Activation::none) a.backward += nn::f32_bytes(x);
  }
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void BatchNorm::release_activations() {
  drop(x_);
  drop(y_);
  drop(dx_);
  drop(save_mean_);
  drop(save_invstd_);
  drop(dpre_);
}

}  // namespace codistill
