#include "codistill/nn/blocks/sequential.hpp"

#include <algorithm>
#include <stdexcept>

#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/blocks/residual.hpp"

namespace codistill {

using kernels::Tensor;

void Sequential::add(std::string name, ModulePtr child) {
  if (sealed_) throw std::logic_error("Sequential::add: '" + name + "' after the model's parameter arena was built");
  if (!child) throw std::invalid_argument("Sequential::add: null module '" + name + "'");
  if (name.empty() || name.find('/') != std::string::npos)
    throw std::invalid_argument("Sequential::add: name '" + name + "' must be non-empty without '/'");
  for (const auto& [n, m] : children_)
    if (n == name) throw std::invalid_argument("Sequential::add: duplicate name '" + name + "'");
  child->set_queue(queue());
  children_.emplace_back(std::move(name), std::move(child));
  first_with_params_ = kUnknown;
  queue_changed();
}

kernels::Shape Sequential::output_shape(const kernels::Shape& input) const {
  kernels::Shape s = input;
  for (const auto& [name, m] : children_) {
    try {
      s = m->output_shape(s);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("'" + name + "': " + e.what());
    }
  }
  return s;
}

void Sequential::for_each_child(const ChildFn& fn) {
  for (auto& [name, m] : children_) fn(name, *m);
}

Tensor Sequential::do_forward(const Tensor& x, bool training) { return forward_prefix(x, training, children_.size()); }

Tensor Sequential::forward_prefix(const Tensor& x, bool training, std::size_t n) {
  if (n > children_.size()) throw std::logic_error("Sequential::forward_prefix: more children than there are");
  Tensor h = x;
  auto run = [&](std::size_t i) {
    auto& [name, m] = children_[i];
    try {
      h = m->forward(h, training);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("'" + name + "': " + e.what());
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (i + 1 < n && runs_after_next(i)) {  // the pool first, then the relu (see the header)
      run(i + 1);
      run(i);
      ++i;
    } else {
      run(i);
    }
  }
  return h;
}

Tensor Sequential::do_backward(const Tensor& dy, bool need_dx) { return backward_prefix(dy, children_.size(), need_dx); }

Tensor Sequential::backward_prefix(const Tensor& dy, std::size_t n, bool need_dx) {
  if (n > children_.size()) throw std::logic_error("Sequential::backward_prefix: more children than there are");
  // Children before the first with parameters need no input gradient and have no grads.
  if (first_with_params_ > children_.size()) {
    first_with_params_ = children_.size();
    for (std::size_t i = 0; i < children_.size(); ++i)
      if (children_[i].second->has_params()) {
        first_with_params_ = i;
        break;
      }
  }
  const std::size_t first = need_dx ? 0 : std::min(first_with_params_, n);
  Tensor g = dy;
  auto run = [&](std::size_t i) {
    auto& [name, m] = children_[i];
    try {
      g = m->backward(g, /*need_dx=*/need_dx || i > first);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("'" + name + "' backward: " + e.what());
    }
  };
  for (std::size_t i = n; i-- > first;) {
    if (i >= first + 1 && runs_after_next(i - 1)) {  // forward ran i, then i - 1: backward the other way
      run(i - 1);
      run(i);
      if (after_child_backward_) after_child_backward_(i);
      --i;
    } else {
      run(i);
    }
    if (after_child_backward_) after_child_backward_(i);
  }
  return need_dx ? g : Tensor{};
}

void Sequential::queue_changed() {
  // Linear -> ReLU/GELU, BatchNorm -> ReLU and Residual -> ReLU pairs fuse where the backend
  // has the op, and unfuse elsewhere: the first applies the activation, which passes through.
  for (std::size_t i = 0; i < children_.size(); ++i) {
    auto* act = i + 1 < children_.size() ? dynamic_cast<ActivationLayer*>(children_[i + 1].second.get()) : nullptr;
    if (auto* linear = dynamic_cast<Linear*>(children_[i].second.get())) {
      const bool fuse = act && backend().supports(kernels::Op::linear_activation, linear->param_dtype());
      linear->set_fused_activation(fuse ? act->activation() : kernels::Activation::none);
      if (act) act->set_passthrough(fuse);
    } else if (auto* bn = dynamic_cast<BatchNorm*>(children_[i].second.get())) {
      const bool fuse = act && act->activation() == kernels::Activation::relu &&
                        backend().supports(kernels::Op::batchnorm_activation, bn->param_dtype());
      bn->set_fused_activation(fuse ? kernels::Activation::relu : kernels::Activation::none);
      if (act) act->set_passthrough(fuse);
    } else if (auto* res = dynamic_cast<Residual*>(children_[i].second.get())) {
      // A residual block has no parameters of its own: asked for float32, the dtype the model
      // is built in (the CPU has the op in float64 too, CUDA in float32 only).
      const bool fuse = act && act->activation() == kernels::Activation::relu &&
                        backend().supports(kernels::Op::add_activation, res->param_dtype());
      res->set_fused_activation(fuse ? kernels::Activation::relu : kernels::Activation::none);
      if (act) act->set_passthrough(fuse);
    }
  }
  // ReLU -> MaxPool2d pairs: the relu after the pool (exact, see the header), on every
  // backend; decided after the fusions above, which may make the relu a passthrough.
  after_next_.assign(children_.size(), false);
  for (std::size_t i = 0; i + 1 < children_.size(); ++i) {
    auto* act = dynamic_cast<ActivationLayer*>(children_[i].second.get());
    if (act && act->activation() == kernels::Activation::relu && !act->passthrough() &&
        dynamic_cast<MaxPool2d*>(children_[i + 1].second.get()))
      after_next_[i] = true;
  }
}

// The children in forward's order (a relu that runs after its pool sees the pool's
// output); as in backward_prefix, the children before the first with parameters run no
// backward when no input gradient is wanted, and that first one computes none.
ActivationBytes Sequential::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  std::size_t first = 0;
  if (!need_dx)
    while (first < children_.size() && !children_[first].second->has_params()) ++first;
  ActivationBytes total{0, 0, x};
  // Forwards without gradients: a block's released buffers serve later blocks of the same
  // shapes only, so the pool keeps one working set per shape (a resnet's stages): their
  // transients add up over the blocks' output shapes, the largest of each.
  std::vector<std::pair<kernels::Shape, std::int64_t>> by_shape;
  auto plan = [&](std::size_t i) {
    Module& child = *children_[i].second;
    ActivationBytes a = child.plan(total.output, training, need_dx || i > first);
    if (i < first) a.backward = 0;  // forward in training mode, no backward
    if (!training && child.releases(false)) {
      auto it = std::find_if(by_shape.begin(), by_shape.end(), [&](const auto& e) { return e.first == a.output; });
      if (it == by_shape.end()) by_shape.emplace_back(a.output, a.transient);
      else it->second = std::max(it->second, a.transient);
    }
    total.add(a);
    total.output = a.output;
  };
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (i + 1 < children_.size() && runs_after_next(i)) {
      plan(i + 1);
      plan(i);
      ++i;
    } else {
      plan(i);
    }
  }
  std::int64_t pooled = 0;
  for (const auto& [shape, bytes] : by_shape) pooled += bytes;
  total.transient = std::max(total.transient, pooled);
  return total;
}

}  // namespace codistill
