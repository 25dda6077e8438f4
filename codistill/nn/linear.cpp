#include "codistill/nn/linear.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "codistill/nn/init.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cuda/linear.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  if (in_ < 1 || out_ < 1)
    throw std::invalid_argument("linear: in and out features must be >= 1, got in " +
                                std::to_string(in_) + ", out " + std::to_string(out_));
  w_ = Tensor::zeros({out_, in_});
  dw_ = Tensor::zeros({out_, in_});
  if (has_bias_) {
    b_ = Tensor::zeros({out_});
    db_ = Tensor::zeros({out_});
  }
}

Shape Linear::output_shape(const Shape& input) const {
  if (kernels::shape_numel(input) != in_ || input.size() != 1)
    throw std::invalid_argument("linear: expected input [" + std::to_string(in_) + "], got " +
                                kernels::shape_str(input));
  return {out_};
}

Tensor Linear::forward(const Tensor& x, bool /*training*/) {
  nn::check_input(x, w_.dtype(), device_, "linear");
  if (x.ndim() != 2 || x.dim(1) != in_)
    throw std::invalid_argument("linear: expected input [B, " + std::to_string(in_) + "], got " +
                                kernels::shape_str(x.shape()));
  if (device_.is_cuda()) return forward_cuda(x);
  const std::int64_t batch = x.dim(0);
  x_ = x;
  nn::ensure_buffer(y_, {batch, out_}, x.dtype());
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    kernels::cpu::linear_forward<T>(x.data<T>(), w_.data<T>(), has_bias_ ? b_.data<T>() : nullptr,
                                    y_.data<T>(), batch, out_, in_, impl_);
  });
  return y_;
}

Tensor Linear::backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("linear: backward before forward");
  kernels::check_shape(dy, {x_.dim(0), out_}, "linear backward: dy");
  nn::check_input(dy, w_.dtype(), device_, "linear backward");
  if (device_.is_cuda()) return backward_cuda(dy, need_dx);
  const std::int64_t batch = x_.dim(0);
  if (need_dx) nn::ensure_buffer(dx_, x_.shape(), x_.dtype());
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    kernels::cpu::linear_backward<T>(x_.data<T>(), w_.data<T>(), dy.data<T>(),
                                     need_dx ? dx_.data<T>() : nullptr, dw_.data<T>(),
                                     has_bias_ ? db_.data<T>() : nullptr, batch, out_, in_,
                                     /*accumulate=*/true, impl_);
  });
  return need_dx ? dx_ : Tensor{};
}

Tensor Linear::forward_cuda(const Tensor& x) {
  namespace cuda = kernels::cuda;
  const std::int64_t batch = x.dim(0);
  x_ = x;
  nn::ensure_buffer(y_, {batch, out_}, x.dtype(), device_);
  const float* b = has_bias_ ? b_.data<float>() : nullptr;
  if (fused_ == cuda::Activation::none) {
    cuda::linear_forward(x.data<float>(), w_.data<float>(), b, y_.data<float>(), batch, out_, in_, ctx_);
    return y_;
  }
  // GEMM without bias, then bias + activation in one pass; gelu's backward needs the
  // pre-activation, relu's only the output.
  cuda::linear_forward(x.data<float>(), w_.data<float>(), nullptr, y_.data<float>(), batch, out_, in_, ctx_);
  float* pre = nullptr;
  if (fused_ == cuda::Activation::gelu) pre = nn::ensure_buffer(pre_, {batch, out_}, x.dtype(), device_).data<float>();
  cuda::bias_activation_forward(y_.data<float>(), b, pre, batch, out_, fused_, ctx_);
  return y_;
}

Tensor Linear::backward_cuda(const Tensor& dy, bool need_dx) {
  namespace cuda = kernels::cuda;
  require_grads("linear");
  const std::int64_t batch = x_.dim(0);
  const bool accumulate = accumulate_grads();
  if (need_dx) nn::ensure_buffer(dx_, x_.shape(), x_.dtype(), device_);
  float* dx = need_dx ? dx_.data<float>() : nullptr;
  float* db = has_bias_ ? db_.data<float>() : nullptr;
  if (fused_ == cuda::Activation::none) {
    cuda::linear_backward(x_.data<float>(), w_.data<float>(), dy.data<float>(), dx, dw_.data<float>(), db, batch,
                          out_, in_, accumulate, ctx_);
    return need_dx ? dx_ : Tensor{};
  }
  // Through the activation first (its own buffer: dy belongs to the next layer), the bias
  // gradient in the same pass, then the GEMMs on the pre-activation gradient.
  nn::ensure_buffer(dpre_, {batch, out_}, dy.dtype(), device_);
  const float* saved = fused_ == cuda::Activation::relu ? y_.data<float>() : pre_.data<float>();
  cuda::bias_activation_backward(dy.data<float>(), saved, dpre_.data<float>(), db, batch, out_, fused_, accumulate,
                                 ctx_);
  cuda::linear_backward(x_.data<float>(), w_.data<float>(), dpre_.data<float>(), dx, dw_.data<float>(), nullptr,
                        batch, out_, in_, accumulate, ctx_);
  return need_dx ? dx_ : Tensor{};
}

std::vector<Param> Linear::params() {
  std::vector<Param> p{{"weight", &w_, &dw_}};
  if (has_bias_) p.push_back({"bias", &b_, &db_});
  return p;
}

void Linear::init_params(Rng& rng, const std::string& init) {
  nn::init_weight_bias(w_, has_bias_ ? &b_ : nullptr, in_, out_, rng, init);
}

void Linear::to_dtype(kernels::DType dtype) {
  for (Tensor* t : {&w_, &b_, &dw_, &db_})
    if (t->defined()) *t = t->to(dtype);
}

}  // namespace codistill
