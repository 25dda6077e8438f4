#include "codistill/nn/linear.hpp"

#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "codistill/nn/init.hpp"
#include "kernels/cpu/linear.hpp"

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
  nn::check_cpu_dtype(x, w_.dtype(), "linear");
  if (x.ndim() != 2 || x.dim(1) != in_)
    throw std::invalid_argument("linear: expected input [B, " + std::to_string(in_) + "], got " +
                                kernels::shape_str(x.shape()));
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
  nn::check_cpu_dtype(dy, w_.dtype(), "linear backward");
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
