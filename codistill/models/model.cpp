#include "codistill/models/model.hpp"
#include "codistill/nn/layers/tied_linear.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/channels_last.hpp"
#include "codistill/nn/buffer_pool.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace codistill {

using kernels::Tensor;

Model::Model() : root_(std::make_unique<Sequential>()) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

void Model::add(std::string name, ModulePtr module) {
  if (finalized_) throw std::logic_error("Model::add: '" + name + "' after the parameter arena was built");
  try {
    root_->add(std::move(name), std::move(module));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("Model::add: ") + e.what());
  }
}

void Model::finalize() {
  if (finalized_) return;
  arena_.build(*root_);
  // The tree is complete from here on (add() and every Sequential's add() refuse more):
  // which modules hold parameters, and whether all of them can write their gradients, is
  // fixed, so the per-step gradient bookkeeping below walks this list instead of the tree.
  param_modules_.clear();
  all_overwrite_grads_ = true;
  root_->seal();
  visit_modules(*root_, [this](const std::string&, Module& m) {
    if (auto* s = dynamic_cast<Sequential*>(&m)) s->seal();
    if (m.params().empty()) return;
    param_modules_.push_back(&m);
    if (!m.can_overwrite_grads()) all_overwrite_grads_ = false;
  });
  if (!release_chosen_) apply_release_in_eval(uniform_blocks());
  finalized_ = true;
}

ParamArena& Model::arena() {
  finalize();
  return arena_;
}

Tensor Model::forward(const Tensor& x, bool training) {
  if (root_->size() == 0) throw std::logic_error("Model::forward: the model has no layers");
  finalize();
  training ? leave_eval_pool() : use_eval_pool();
  try {
    return root_->forward(x, training);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("layer ") + e.what());
  }
}

namespace {

// A queue with frozen_params may keep converted copies of the weights: a backward (and the
// update after it) would leave those stale.
void check_trainable(const Model& m) {
  if (m.queue().options().frozen_params)
    throw std::logic_error("Model::backward: the model's queue has QueueOptions::frozen_params (a forward-only "
                           "teacher's); it cannot be trained");
}

}  // namespace

void Model::backward(const Tensor& dlogits) {
  check_trainable(*this);
  finalize();
  try {
    root_->backward(dlogits, /*need_dx=*/false);
  } catch (const std::invalid_argument& e) {
    abandon_stale_grads();
    throw std::invalid_argument(std::string("layer ") + e.what());
  } catch (...) {
    abandon_stale_grads();
    throw;
  }
  zero_stale_grads();
}

void Model::abandon_stale_grads() {
  // A backward that threw after zero_grad_lazily leaves some layers' gradients written,
  // some stale: zeroed, so that a caller who goes on (another backward) adds onto zeros.
  if (!grads_stale_) return;
  try {
    zero_grad();
  } catch (...) {  // the device failed too: the first error is the one to report
  }
}

void Model::set_gradients_ready(std::function<void(std::int64_t first)> fn) {
  ready_hook_ = static_cast<bool>(fn);
  if (!fn) {
    root_->set_after_child_backward(nullptr);
    return;
  }
  finalize();
  // ready[i]: the lowest gradient offset among children i.. (those done once child i is),
  // the end of the block where none of them owns a parameter.
  const auto& children = root_->children();
  const std::int64_t end = arena_.grads().numel();
  std::vector<std::int64_t> ready(children.size() + 1, end);
  // Each child's [lowest, highest end) of its own entries; they must ascend with the
  // children without overlapping, or an early call could cover a gradient a later-running
  // (earlier) child still adds to. The arena lays entries out in module order, so they do;
  // should that ever change, nothing is reported early (the reduction then waits for the
  // end of backward) rather than something wrong.
  std::int64_t below = end;  // the lowest offset of the children after this one
  bool ordered = true;
  for (std::size_t i = children.size(); i-- > 0;) {
    const std::string prefix = children[i].first + "/";
    std::int64_t lo = end, hi = 0;
    for (const ArenaEntry& e : arena_.param_entries())
      if (e.path.compare(0, prefix.size(), prefix) == 0) {
        lo = std::min(lo, e.offset);
        hi = std::max(hi, e.offset + e.numel);
      }
    if (lo < end && hi > below) ordered = false;
    below = std::min(below, lo);
    ready[i] = std::min(ready[i + 1], lo);
  }
  if (!ordered) {
    root_->set_after_child_backward(nullptr);
    return;
  }
  root_->set_after_child_backward([fn = std::move(fn), ready = std::move(ready), end](std::size_t i) {
    if (ready[i] < end) fn(ready[i]);
  });
}

std::optional<Model::LinearHead> Model::linear_head() {
  finalize();
  if (root_->size() == 0) return std::nullopt;
  Module& last = *root_->children().back().second;
  LinearHead h;
  if (auto* lin = dynamic_cast<Linear*>(&last)) {
    if (lin->fused_activation() != kernels::Activation::none) return std::nullopt;
    h.weight = &lin->weight();
    h.weight_grad = lin->weight_grad().defined() ? &lin->weight_grad() : nullptr;
    if (lin->has_bias()) {
      h.bias = &lin->bias();
      h.bias_grad = lin->bias_grad().defined() ? &lin->bias_grad() : nullptr;
    }
    return h;
  }
  if (auto* tied = dynamic_cast<TiedLinear*>(&last)) {
    h.weight = &tied->owner().weight();
    h.weight_grad = tied->owner().weight_grad().defined() ? &tied->owner().weight_grad() : nullptr;
    return h;
  }
  return std::nullopt;
}

Tensor Model::forward_features(const Tensor& x, bool training) {
  if (!linear_head()) throw std::logic_error("Model::forward_features: the model does not end in a linear head");
  training ? leave_eval_pool() : use_eval_pool();
  try {
    return root_->forward_prefix(x, training, root_->size() - 1);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("layer ") + e.what());
  }
}

void Model::backward_features(const Tensor& dfeatures) {
  check_trainable(*this);
  if (!linear_head()) throw std::logic_error("Model::backward_features: the model does not end in a linear head");
  if (grads_stale_)
    throw std::logic_error("Model::backward_features after zero_grad_lazily: the fused head's loss adds into the "
                           "head's gradients, which must be zeroed first (zero_grad)");
  try {
    root_->backward_prefix(dfeatures, root_->size() - 1, /*need_dx=*/false);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("layer ") + e.what());
  }
}

void Model::zero_grad() {
  finalize();
  if (grads_stale_) {
    for (Module* m : param_modules_) m->set_grads_stale(false);
    grads_stale_ = false;
  }
  if (arena_.grads().defined()) queue().zero(arena_.grads());
}

void Model::zero_grad_lazily() {
  finalize();
  if (!arena_.grads().defined()) return;
  if (!all_overwrite_grads_) return zero_grad();
  for (Module* m : param_modules_) m->set_grads_stale(true);
  grads_stale_ = true;
}

void Model::zero_stale_grads() {
  if (!grads_stale_) return;
  grads_stale_ = false;
  for (Module* m : param_modules_) {
    if (!m->grads_stale()) continue;
    // Its gradients were reported final (set_gradients_ready) when its turn passed: a
    // reduction may be summing them already. No module skips its backward today.
    if (ready_hook_)
      throw std::logic_error("Model::backward: a module marked by zero_grad_lazily did not run its backward while "
                             "gradients_ready reported its gradients final");
    m->set_grads_stale(false);
    for (const Param& p : m->params())
      if (p.grad && p.grad->defined()) queue().zero(*p.grad);
  }
}

std::vector<NamedParam> Model::params() {
  finalize();
  return collect_params(*root_);
}

std::vector<NamedBuffer> Model::buffers() {
  finalize();
  return collect_buffers(*root_);
}

std::int64_t Model::num_params() { return arena().num_params(); }

std::string Model::fingerprint() {
  // FNV-1a 64 over "path:[d0, d1];" for each parameter in order (shape as shape_str), then,
  // with fingerprint_modules, over "path;" for each module in pre-order (visit_modules).
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const std::string& text) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  };
  for (auto& p : params()) mix(p.path + ":" + kernels::shape_str(p.value->shape()) + ";");
  if (fingerprint_modules_) visit_modules(*root_, [&](const std::string& path, Module&) { mix(path + ";"); });
  return fmt::format("{:016x}", h);
}

void Model::to_dtype(kernels::DType dtype) {
  if (!device().is_cpu()) throw std::invalid_argument("Model::to_dtype: only on the CPU");
  finalize();
  arena_.to_dtype(*root_, dtype);
  root_->set_queue(queue());  // containers re-decide fusions for the new dtype
}

void Model::set_reference(bool reference) {
  if (!device().is_cpu()) throw std::invalid_argument("Model::set_reference: reference loops exist on the CPU only");
  root_->set_queue(kernels::default_cpu_queue(reference));
  queue_.reset();
}

void Model::to_device(kernels::Device device, kernels::QueueOptions options) { place(device, options, true); }

void Model::to_device_uninitialized(kernels::Device device, kernels::QueueOptions options) {
  place(device, options, false);
}

void Model::place(kernels::Device device, kernels::QueueOptions options, bool copy) {
  finalize();
  kernels::Backend& backend = kernels::backend_for(device);
  const kernels::DType dtype = arena_.values().dtype();
  // Every op the model uses checks its dtype when it runs; linear is the one every model
  // has, so a device that cannot train this dtype is refused here, before anything moves.
  if (!backend.supports(kernels::Op::linear, dtype))
    throw std::invalid_argument(std::string("model parameters are ") + kernels::dtype_name(dtype) + "; " +
                                backend.name() + " does not compute in that dtype (to_dtype(float32) first)");
  if (!backend.supports_compute(options.compute))
    throw std::invalid_argument(std::string(backend.name()) + " cannot compute GEMMs in " +
                                kernels::compute_name(options.compute));
  if (arena_.matrices().defined()) {
    if (!backend.supports(kernels::Op::linear_bf16_weights, kernels::DType::f32) ||
        !backend.supports(kernels::Op::embedding_bf16_table, kernels::DType::f32))
      throw std::invalid_argument(std::string("a model with bf16 weights: the ") + backend.name() +
                                  " backend has no bf16-weight ops (linear, embedding) yet");
    if (options.compute != kernels::Compute::bf16)
      throw std::invalid_argument("a model with bf16 weights needs a queue computing in bf16 (QueueOptions::compute)");
  }
  const bool channels_last = wants_channels_last(backend);
  auto queue = backend.make_queue(device, options);
  synchronize();  // nothing may still run on the memory moved away
  arena_.to_device(*root_, device, copy);
  // The modules move to the new queue before the old one is released (what they hold of
  // the old one, e.g. an event, is let go while it still exists).
  root_->set_queue(*queue);
  queue_ = std::move(queue);
  apply_channels_last(channels_last);
}

void Model::set_memory_format(const std::string& format) {
  if (format != "auto" && format != "nchw" && format != "nhwc")
    throw std::invalid_argument("memory format must be one of auto, nchw, nhwc, got '" + format + "'");
  const std::string old = memory_format_;
  memory_format_ = format;
  try {
    apply_channels_last(wants_channels_last(queue().backend()));
  } catch (...) {
    memory_format_ = old;
    throw;
  }
}

bool Model::wants_channels_last(const kernels::Backend& backend) const {
  if (memory_format_ == "nchw") return false;
  const bool can = channels_last_allowed_ && backend.supports_channels_last();
  if (memory_format_ == "nhwc" && !can)
    throw std::invalid_argument(
        channels_last_allowed_
            ? std::string("memory format nhwc: the ") + backend.name() + " backend has no channels-last image ops"
            : std::string("memory format nhwc: this model cannot run channels-last (only a resnet on inputs of one "
                          "channel can)"));
  return can;
}

void Model::apply_channels_last(bool on) {
  visit_modules(*root_, [&](const std::string&, Module& m) {
    if (auto* layer = dynamic_cast<ChannelsLastLayer*>(&m)) layer->set_channels_last(on);
  });
  channels_last_ = on;
}

void Model::drop_grads() {
  finalize();
  synchronize();
  arena_.drop_grads(*root_);
}

void Model::to_bf16_weights() {
  drop_grads();
  arena_.to_bf16_matrices(*root_);
  root_->set_queue(queue());  // containers re-decide their fusions for what the weights now are
}

kernels::Device Model::device() const { return queue().device(); }
kernels::Queue& Model::queue() const { return queue_ ? *queue_ : root_->queue(); }
void Model::synchronize() const { queue().synchronize(); }

std::vector<std::pair<std::string, Rng*>> Model::rngs() { return collect_rngs(*root_); }

std::string Model::summary() {
  finalize();
  std::string out = fmt::format("{:<22} {:<10} {:<18} {:>10}\n", "module", "kind", "output", "params");
  if (!input_shape_.empty()) out += fmt::format("{:<22} {:<10} {:<18} {:>10}\n", "input", "", kernels::shape_str(input_shape_), 0);
  // Shapes flow through the root's direct children; deeper modules are listed indented
  // with their parameter counts.
  std::function<void(Module&, int, kernels::Shape*)> walk = [&](Module& m, int depth, kernels::Shape* shape) {
    m.for_each_child([&](const std::string& name, Module& child) {
      std::int64_t n = 0;
      for (auto& p : collect_params(child)) n += p.value->numel();
      std::string shown;
      if (shape && !shape->empty()) {
        *shape = child.output_shape(*shape);
        shown = kernels::shape_str(*shape);
      }
      out += fmt::format("{:<22} {:<10} {:<18} {:>10}\n", std::string(2 * depth, ' ') + name, child.kind(), shown, n);
      walk(child, depth + 1, nullptr);
    });
  };
  kernels::Shape shape = input_shape_;
  walk(*root_, 0, &shape);
  out += fmt::format("total parameters {}, fingerprint {}", num_params(), fingerprint());
  return out;
}

}  // namespace codistill
