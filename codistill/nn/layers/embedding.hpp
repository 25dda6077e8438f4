#pragma once
// Token embedding (the input layer of a language model): int32 token ids [B, T] become rows
// [B*T, dim] = weight[id] (kernels/ops.hpp, EmbeddingShape). The rows of everything after
// it are the B*T tokens, batch-major (row b*T + t), so per-example shapes past this layer
// are per token: output_shape([T]) = [dim]. T must equal seq_len: the attention layers that
// follow split the rows back into sequences of that length. Ids outside [0, vocab) throw
// std::out_of_range naming the row and the id. No input gradient (ids are not
// differentiable): backward only accumulates dweight and returns an empty tensor.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

class Embedding : public Layer {
 public:
  // weight [vocab, dim] zeros (float32) until init_params.
  Embedding(std::int64_t vocab, std::int64_t dim, std::int64_t seq_len);

  std::string kind() const override { return "embedding"; }
  std::vector<Param> params() override { return {{"weight", &w_, &dw_}}; }
  std::optional<kernels::DType> input_dtype() const override { return kernels::DType::i32; }
  // [seq_len] -> [dim] (per token).
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  // weight ~ N(0, 0.02^2) (GPT-2), whatever `init` says.
  void init_params(Rng& rng, const std::string& init) override;

  std::int64_t vocab() const { return vocab_; }
  std::int64_t dim() const { return dim_; }
  // The table and its gradient (views into the model's arena once the model is built), for
  // a head tied to this embedding (tied_linear.hpp).
  const kernels::Tensor& weight() const { return w_; }
  kernels::Tensor& weight_grad() { return dw_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  std::int64_t vocab_, dim_, seq_len_;
  kernels::Tensor w_, dw_, ids_, y_;
};

}  // namespace codistill
