#include "codistill/nn/layers/tied_linear.hpp"

#include <stdexcept>

namespace codistill {

using kernels::Activation;
using kernels::Shape;
using kernels::Tensor;

Shape TiedLinear::output_shape(const Shape& input) const {
  if (input != Shape{owner_.dim()})
    throw std::invalid_argument("tied_linear: expected input [" + std::to_string(owner_.dim()) + "], got " +
                                kernels::shape_str(input));
  return {owner_.vocab()};
}

Tensor TiedLinear::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 2 || x.dim(1) != owner_.dim())
    throw std::invalid_argument("tied_linear: expected input [B, " + std::to_string(owner_.dim()) + "], got " +
                                kernels::shape_str(x.shape()));
  const Tensor& w = owner_.weight();
  // A bf16 weight is a forward-only copy's storage (ParamArena::to_bf16_matrices): float32 in.
  if (x.dtype() != w.dtype() && !(w.dtype() == kernels::DType::bf16 && x.dtype() == kernels::DType::f32))
    throw std::invalid_argument(std::string("tied_linear: input is ") + kernels::dtype_name(x.dtype()) +
                                " but the tied weight is " + kernels::dtype_name(w.dtype()));
  x_ = x;
  ensure(y_, {x.dim(0), owner_.vocab()}, x.dtype());
  backend().linear_forward(x, w, nullptr, y_, Activation::none, nullptr, queue());
  return y_;
}

Tensor TiedLinear::do_backward(const Tensor& dy, bool need_dx) {
  if (!x_.defined()) throw std::logic_error("tied_linear: backward before forward");
  Tensor& dw = owner_.weight_grad();
  if (!dw.defined()) throw std::logic_error("tied_linear: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, {x_.dim(0), owner_.vocab()}, "tied_linear backward: dy");
  if (need_dx) ensure(dx_, x_.shape(), x_.dtype());
  // The embedding's gradient is shared with the embedding's own backward: always added to.
  backend().linear_backward(x_, owner_.weight(), dy, need_dx ? &dx_ : nullptr, dw, nullptr, Activation::none, nullptr,
                            nullptr, /*accumulate=*/true, queue());
  return need_dx ? dx_ : Tensor{};
}

}  // namespace codistill
