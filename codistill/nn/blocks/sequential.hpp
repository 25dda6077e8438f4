#pragma once
// Sequential: named children run in order; backward in reverse. The root of every model.
// Backward skips the children before the first one with parameters (their input gradient
// is nobody's business) unless the caller wants dx. Where the backend supports it
// (Op::linear_activation), a Linear directly followed by a ReLU/GELU computes the
// activation in its own output pass and the activation layer passes through: decided
// again whenever the queue changes (set_queue).
// A ReLU directly followed by a MaxPool2d runs after it instead (pool, then relu of the
// pooled map): max commutes with relu, and the pools pick among equal maxima by position
// alone, so the output, the input gradient (the window's chosen maximum gets dy where that
// maximum is positive, nothing gets it otherwise) and the parameters' gradients are bit
// for bit those of relu then pool for any input without NaN, and the relu's passes touch
// a quarter of the elements (a 2x2 pool). A NaN in a window: relu first makes it 0 and
// the window's other values decide its output and which of them gets the gradient; pool
// first picks the NaN, the relu makes the output 0 and the window gets no gradient.
// Not for a ReLU that a layer before it applies (passthrough).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

class Sequential : public Module {
 public:
  std::string kind() const override { return "sequential"; }
  // Names are non-empty, without '/', unique among the children. Throws std::logic_error
  // once sealed.
  void add(std::string name, ModulePtr child);
  // No more children from here on: Model::finalize seals every container of its tree, whose
  // parameters then live in the arena (a child added later would have none there).
  void seal() { sealed_ = true; }
  kernels::Shape output_shape(const kernels::Shape& input) const override;
  ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx) override;
  void for_each_child(const ChildFn& fn) override;

  std::size_t size() const { return children_.size(); }
  // The first n children alone (n <= size()): forward through them, and backward from
  // their output (gradients of their parameters accumulate, or are written where
  // Model::zero_grad_lazily marked them; need_dx as for backward).
  // A model whose last child is a linear head runs the rest through these and the head as
  // part of a fused loss (Model::forward_features).
  kernels::Tensor forward_prefix(const kernels::Tensor& x, bool training, std::size_t n);
  kernels::Tensor backward_prefix(const kernels::Tensor& dy, std::size_t n, bool need_dx);
  const std::vector<std::pair<std::string, ModulePtr>>& children() const { return children_; }
  // Called with i after child i's backward (children run last to first), for a caller that
  // starts work on gradients as soon as they are final (Model::set_gradients_ready).
  void set_after_child_backward(std::function<void(std::size_t)> fn) { after_child_backward_ = std::move(fn); }
  // True when child i (a ReLU) runs after child i + 1 (a MaxPool2d): forward runs i + 1
  // then i, backward i then i + 1 (for benches that run the children one by one).
  bool runs_after_next(std::size_t i) const { return i < after_next_.size() && after_next_[i]; }

 protected:
  kernels::Tensor do_forward(const kernels::Tensor& x, bool training) override;
  kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) override;
  void queue_changed() override;

 private:
  static constexpr std::size_t kUnknown = static_cast<std::size_t>(-1);
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::function<void(std::size_t)> after_child_backward_;
  std::vector<bool> after_next_;  // runs_after_next, per child (queue_changed)
  bool sealed_ = false;
  // Index of the first child with parameters (children_.size(): none), found on the first
  // backward after the children last changed.
  std::size_t first_with_params_ = kUnknown;
};

}  // namespace codistill
