#include "codistill/nn/layers/position_embedding.hpp"

#include <stdexcept>

#include "codistill/nn/activation_plan.hpp"
#include "codistill/nn/init.hpp"

namespace codistill {

using kernels::Shape;
using kernels::Tensor;

PositionEmbedding::PositionEmbedding(std::int64_t seq_len, std::int64_t dim) : seq_len_(seq_len), dim_(dim) {
  kernels::EmbeddingShape{0, seq_len, dim}.validate();
  w_ = Tensor::zeros({seq_len, dim});
  dw_ = Tensor::zeros({seq_len, dim});
}

Shape PositionEmbedding::output_shape(const Shape& input) const {
  if (input != Shape{dim_})
    throw std::invalid_argument("position_embedding: expected token rows [" + std::to_string(dim_) + "], got " +
                                kernels::shape_str(input));
  return input;
}

void PositionEmbedding::init_params(Rng& rng, const std::string& /*init*/) { nn::init_normal(w_, 0.02, rng); }

Tensor PositionEmbedding::do_forward(const Tensor& x, bool /*training*/) {
  if (x.ndim() != 2 || x.dim(1) != dim_ || x.dim(0) % seq_len_ != 0)
    throw std::invalid_argument("position_embedding: expected token rows [B*" + std::to_string(seq_len_) + ", " +
                                std::to_string(dim_) + "], got " + kernels::shape_str(x.shape()));
  const std::int64_t rows = x.dim(0);
  if (ids_.numel() != rows || ids_.device() != device()) {
    // Row n is position n % T. Filled on the host (staging) and copied on the queue once
    // per batch size; the staging tensor lives as long as ids_.
    ids_ = Tensor::empty({rows}, kernels::DType::i32, device());
    ids_host_ = backend().staging_for(ids_);
    auto* h = ids_host_.data<std::int32_t>();
    for (std::int64_t n = 0; n < rows; ++n) h[n] = static_cast<std::int32_t>(n % seq_len_);
    queue().copy(ids_, ids_host_);
  }
  ensure(y_, x.shape(), x.dtype());
  backend().embedding_forward(ids_, w_, y_, {rows, seq_len_, dim_}, queue());
  backend().add(y_, x, y_, queue());
  forwarded_ = true;
  return y_;
}

Tensor PositionEmbedding::do_backward(const Tensor& dy, bool need_dx) {
  if (!forwarded_) throw std::logic_error("position_embedding: backward before forward");
  if (!dw_.defined()) throw std::logic_error("position_embedding: backward on a forward-only copy (no grads)");
  kernels::check_shape(dy, {ids_.numel(), dim_}, "position_embedding backward: dy");
  backend().embedding_backward(ids_, dy, dw_, {ids_.numel(), seq_len_, dim_}, queue());
  return need_dx ? dy : Tensor{};  // y = x + pos: dx = dy
}

// y and the int32 position of each row; dx is dy itself.
ActivationBytes PositionEmbedding::plan_activations(const kernels::Shape& x, bool /*training*/, bool /*need_dx*/) {
  return {nn::f32_bytes(x) + x.front() * 4, 0, x};
}

}  // namespace codistill
