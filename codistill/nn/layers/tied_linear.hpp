#pragma once
// A linear map without parameters of its own: y = x W^T with W the weight of an Embedding
// ([vocab, dim], the layout of a Linear(dim -> vocab) weight). A language model's head tied
// to its token embedding (Press & Wolf 2017, GPT-2) is one: the vocabulary matrix is
// stored, checkpointed and updated once. Its gradient needs nothing special: the head's
// backward adds dW += dy^T x into the embedding's gradient, which the embedding's own
// backward also adds to; both accumulate into the arena's gradient block, zeroed once per
// step (an Embedding cannot overwrite its gradient, so a model with one is always zeroed,
// never left to Model::zero_grad_lazily's first-backward writes). The weight is read through the owner at every call, so it follows
// the owner through Model::to_device and to_dtype (the arena rebinds the owner's views).
// The owner must outlive this module (both belong to one model).
#include <string>

#include "codistill/nn/layers/embedding.hpp"
#include "codistill/nn/module.hpp"

namespace codistill {

class TiedLinear : public Layer {
 public:
  explicit TiedLinear(Embedding& owner) : owner_(owner) {}

  std::string kind() const override { return "tied_linear"; }
  // [dim] -> [vocab].
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  Embedding& owner() { return owner_; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;

 private:
  Embedding& owner_;
  kernels::Tensor x_, y_, dx_;
};

}  // namespace codistill
