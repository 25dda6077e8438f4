#include "codistill/nn/layers/embedding.hpp"

#include <stdexcept>

#include "codistill/nn/activation_plan.hpp"
#include "codistill/nn/init.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, std::int64_t seq_len)
    : vocab_(vocab), dim_(dim), seq_len_(seq_len) {
  kernels::EmbeddingShape{0, vocab, dim}.validate();
  if (seq_len < 1) throw std::invalid_argument("embedding: seq_len must be >= 1, got " + std::to_string(seq_len));
  w_ = Tensor::zeros({vocab, dim});
  dw_ = Tensor::zeros({vocab, dim});
}

Shape Embedding::output_shape(const Shape& input) const {
  if (input != Shape{seq_len_})
    throw std::invalid_argument("embedding: expected token ids [" + std::to_string(seq_len_) + "], got " +
                                kernels::shape_str(input));
  return {dim_};
}

void Embedding::init_params(Rng& rng, const std::string& /*init*/) { nn::init_normal(w_, 0.02, rng); }

Tensor Embedding::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 2 || x.dim(1) != seq_len_)
    throw std::invalid_argument("embedding: expected int32 token ids [B, " + std::to_string(seq_len_) + "], got " +
                                kernels::shape_str(x.shape()));
  ids_ = x;
  const kernels::EmbeddingShape s{x.numel(), vocab_, dim_};
  // A table held as bf16 (a teacher's, ParamArena::to_bf16_matrices) gives float32 rows.
  ensure(y_, {s.rows, dim_}, w_.dtype() == kernels::DType::bf16 ? kernels::DType::f32 : w_.dtype());
  backend().embedding_forward(x, w_, y_, s, queue());
  return y_;
}

Tensor Embedding::do_backward(const Tensor& dy, bool /*need_dx*/) {
  if (!ids_.defined()) throw std::logic_error("embedding: backward before forward");
  if (!dw_.defined()) throw std::logic_error("embedding: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, {ids_.numel(), dim_}, "embedding backward: dy");
  backend().embedding_backward(ids_, dy, dw_, {ids_.numel(), vocab_, dim_}, queue());
  return {};  // token ids have no gradient
}

// Token ids [B, T] in, rows [B*T, dim] out; ids have no gradient.
ActivationBytes Embedding::plan_activations(const kernels::Shape& x, bool /*training*/, bool /*need_dx*/) {
  const kernels::Shape out{kernels::shape_numel(x), dim_};
  return {nn::f32_bytes(out), 0, out};
}

}  // namespace codistill
