#include "codistill/nn/layers/attention.hpp"

#include <stdexcept>
#include "codistill/nn/activation_plan.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "materialized") return AttentionKernel::materialized;
  if (name == "flash") return AttentionKernel::flash;
  throw std::invalid_argument("unknown attention kernel '" + name + "' (valid: flash, materialized)");
}

CausalSelfAttention::CausalSelfAttention(std::int64_t d_model, std::int64_t heads, std::int64_t seq_len,
                                         double dropout, AttentionKernel kernel)
    : d_model_(d_model), heads_(heads), seq_len_(seq_len), kernel_(kernel) {
  if (heads < 1 || d_model < 1 || d_model % heads != 0)
    throw std::invalid_argument("causal_self_attention: d_model (" + std::to_string(d_model) +
                                ") must be a positive multiple of heads (" + std::to_string(heads) + ")");
  shape_of(0).validate();
  qkv_ = std::make_unique<Linear>(d_model, 3 * d_model);
  proj_ = std::make_unique<Linear>(d_model, d_model);
  if (dropout > 0) drop_ = std::make_unique<Dropout>(dropout);
  for_each_child([&](const std::string&, Module& c) { c.set_queue(queue()); });
}

kernels::AttentionShape CausalSelfAttention::shape_of(std::int64_t rows) const {
  return {rows / seq_len_, seq_len_, heads_, d_model_ / heads_};
}

Shape CausalSelfAttention::output_shape(const Shape& input) const {
  if (input != Shape{d_model_})
    throw std::invalid_argument("causal_self_attention: expected token rows [" + std::to_string(d_model_) +
                                "], got " + kernels::shape_str(input));
  return input;
}

void CausalSelfAttention::for_each_child(const ChildFn& fn) {
  fn("qkv", *qkv_);
  fn("proj", *proj_);
  if (drop_) fn("drop", *drop_);
}

Tensor CausalSelfAttention::do_forward(const Tensor& x, bool training) {
  if (x.ndim() != 2 || x.dim(1) != d_model_ || x.dim(0) % seq_len_ != 0)
    throw std::invalid_argument("causal_self_attention: expected token rows [B*" + std::to_string(seq_len_) + ", " +
                                std::to_string(d_model_) + "], got " + kernels::shape_str(x.shape()));
  const auto s = shape_of(x.dim(0));
  rows_ = x.dim(0);
  qkv_out_ = qkv_->forward(x, training);
  ensure(att_, {rows_, d_model_}, x.dtype());
  if (kernel_ == AttentionKernel::flash) {
    ensure(lse_, {s.batch, s.heads, s.seq}, x.dtype());
    backend().flash_attention_forward(qkv_out_, att_, lse_, s, queue());
  } else {
    ensure(probs_, {s.batch, s.heads, s.seq, s.seq}, x.dtype());
    backend().attention_forward(qkv_out_, att_, probs_, s, queue());
  }
  const Tensor y = proj_->forward(att_, training);
  return drop_ ? drop_->forward(y, training) : y;
}

Tensor CausalSelfAttention::do_backward(const Tensor& dy, bool need_dx) {
  if (rows_ < 0) throw std::logic_error("causal_self_attention: backward before forward");
  kernels::check_shape(dy, {rows_, d_model_}, "causal_self_attention backward: dy");
  const auto s = shape_of(rows_);
  const Tensor dproj = drop_ ? drop_->backward(dy, true) : dy;
  const Tensor datt = proj_->backward(dproj, true);
  ensure(dqkv_, {rows_, 3 * d_model_}, dy.dtype());
  if (kernel_ == AttentionKernel::flash) {
    backend().flash_attention_backward(qkv_out_, att_, lse_, datt, dqkv_, s, queue());
  } else {
    ensure(scratch_, probs_.shape(), dy.dtype());
    backend().attention_backward(qkv_out_, probs_, datt, dqkv_, scratch_, s, queue());
  }
  return qkv_->backward(dqkv_, need_dx);
}

// qkv and proj (Linears) and the dropout, plus the attention's own: its output, the
// probabilities [B, H, T, T] and backward's scratch of that size (or, flash, one
// log-sum-exp per row and head), and dqkv.
ActivationBytes CausalSelfAttention::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  const std::int64_t rows = x.front();
  ActivationBytes a = qkv_->plan(x, training, need_dx);
  a.output = x;
  a.add(proj_->plan(x, training, true));
  if (drop_) a.add(drop_->plan(x, training, true));
  const std::int64_t probs = rows * heads_ * seq_len_;  // B * H * T * T
  a.forward += nn::f32_bytes(rows * d_model_);
  if (kernel_ == AttentionKernel::flash) {
    a.forward += nn::f32_bytes(rows / seq_len_ * heads_ * seq_len_);
  } else {
    a.forward += nn::f32_bytes(probs);
    if (training) a.backward += nn::f32_bytes(probs);
  }
  if (training) a.backward += nn::f32_bytes(rows * 3 * d_model_);
  return a;
}

// Recompute (Module::set_recompute): the next forward allocates these again.
void CausalSelfAttention::release_activations() {
  drop(qkv_out_);
  drop(att_);
  drop(probs_);
  drop(scratch_);
  drop(lse_);
  drop(dqkv_);
  Module::release_activations();
}

}  // namespace codistill
