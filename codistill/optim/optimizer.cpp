// make_optimizer: the kind-keyed optimizer factory (tiny-cuda-nn style: unknown kinds throw
// with the list of valid ones), and the slot blocks every optimizer shares.
#include "codistill/optim/optimizer.hpp"

#include <cmath>
#include <stdexcept>

#include "codistill/optim/adamw.hpp"
#include "codistill/optim/sgd.hpp"

namespace codistill {

using kernels::Tensor;

kernels::Tensor& Optimizer::slot(const std::string& name) {
  Tensor& values = model_->arena().values();
  Tensor& s = slots_[name];
  if (!s.defined()) {
    s = Tensor::empty(values.shape(), values.dtype(), values.device());
    model_->queue().zero(s);
  } else if (s.numel() != values.numel()) {
    throw std::logic_error(kind() + ": the model's parameters changed size from " + std::to_string(s.numel()) +
                           " to " + std::to_string(values.numel()));
  } else if (s.dtype() != values.dtype() || s.device() != values.device()) {
    // The model moved (Model::to_dtype / to_device); the slot follows without losing its
    // values. Conversions run on the CPU; the model's queue is idle after a move.
    model_->synchronize();
    Tensor host = s.to(kernels::Device::cpu());
    if (host.dtype() != values.dtype()) host = host.to(values.dtype());
    s = host.to(values.device());
  }
  return s;
}

std::map<std::string, std::map<std::string, Tensor*>> Optimizer::state() {
  std::map<std::string, std::map<std::string, Tensor*>> out;
  const auto names = slot_names();
  if (names.empty()) return out;
  for (const auto& n : names) slot(n);
  // Views are rebuilt only when a block was (re)allocated.
  if (views_of_ != slots_[names.front()].raw()) {
    views_.clear();
    for (const auto& n : names)
      for (const ArenaEntry& e : model_->arena().param_entries()) views_[e.path][n] = ParamArena::view(slots_[n], e);
    views_of_ = slots_[names.front()].raw();
  }
  for (auto& [path, slots] : views_)
    for (auto& [n, t] : slots) out[path][n] = &t;
  return out;
}

OptimizerBlocks Optimizer::live_blocks() {
  OptimizerBlocks b;
  b.values = model_->arena().values();
  for (const auto& n : slot_names()) b.slots[n] = slot(n);
  return b;
}

OptimizerBlocks Optimizer::blocks_like() {
  const OptimizerBlocks live = live_blocks();
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); };
  OptimizerBlocks b;
  b.values = like(live.values);
  for (const auto& [n, t] : live.slots) b.slots[n] = like(t);
  return b;
}

OptimizerBlocks Optimizer::step_into(double lr, OptimizerBlocks into) {
  OptimizerBlocks before = live_blocks();
  auto layout_error = [&](const std::string& what) {
    return std::invalid_argument(kind() + ": an out-of-place step needs blocks laid out like the live ones: " +
                                 what);
  };
  if (into.slots.size() != before.slots.size()) throw layout_error("another set of slots");
  for (const auto& [n, t] : before.slots) {
    auto it = into.slots.find(n);
    if (it == into.slots.end()) throw layout_error("no slot " + n);
    if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype() || it->second.device() != t.device())
      throw layout_error("slot " + n + " differs");
    if (it->second.same_memory(t)) throw layout_error("slot " + n + " is the live block");
  }
  if (into.values.same_memory(before.values)) throw layout_error("the values are the live block");
  ParamArena& arena = model_->arena();
  arena.replace_values(model_->root(), std::move(into.values));  // checks the values' layout
  for (auto& [n, t] : into.slots) slots_[n] = std::move(t);
  const std::int64_t t_before = t_;
  try {
    update(lr, &before);  // the backend checks that nothing it reads overlaps what it writes
  } catch (...) {  // the live state stays what it was
    arena.replace_values(model_->root(), before.values);
    for (const auto& [n, t] : before.slots) slots_[n] = t;
    t_ = t_before;
    throw;
  }
  return before;
}

std::vector<std::string> optimizer_kinds() { return {"adamw", "sgd"}; }

void Optimizer::set_clip_grad_norm(double max_norm) {
  if (!(max_norm >= 0 && std::isfinite(max_norm)))
    throw std::invalid_argument(kind() + ": clip_grad_norm must be >= 0 and finite, got " + std::to_string(max_norm));
  clip_grad_norm_ = max_norm;
  if (max_norm == 0) last_grad_norm_.reset();
}

double Optimizer::clip_scale() {
  if (clip_grad_norm_ == 0) return 1;
  const Tensor& grads = model_->arena().grads();
  const double norm = std::sqrt(model_->queue().backend().sum_squares(grads, model_->queue()));
  last_grad_norm_ = norm;
  // A norm that is not finite leaves the gradients as they are: the loss of that step was
  // not finite either, and the step stops the run (train/step.hpp) before any update.
  return norm > clip_grad_norm_ && std::isfinite(norm) ? clip_grad_norm_ / (norm + 1e-6) : 1.0;
}

void Optimizer::set_decay_filter(const std::string& which) {
  if (which != "all" && which != "matrices")
    throw std::invalid_argument(kind() + ": unknown decay filter '" + which + "' (valid: all, matrices)");
  decay_matrices_only_ = which == "matrices";
}

std::vector<Optimizer::DecayRun> Optimizer::decay_runs() {
  const std::int64_t n = model_->arena().values().numel();
  if (!decay_matrices_only_) return {{0, n, true}};
  std::vector<DecayRun> runs;
  for (const ArenaEntry& e : model_->arena().param_entries()) {
    const bool decay = e.shape.size() >= 2;
    if (!runs.empty() && runs.back().decay == decay) continue;
    if (!runs.empty()) runs.back().end = e.offset;
    runs.push_back({runs.empty() ? 0 : e.offset, n, decay});
  }
  if (runs.empty()) runs.push_back({0, n, true});
  return runs;
}

kernels::Tensor Optimizer::part(const kernels::Tensor& block, const DecayRun& r) {
  return block.view(r.begin, {r.end - r.begin});
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, Trainable& model) {
  std::unique_ptr<Optimizer> o;
  if (cfg.kind == "sgd") o = std::make_unique<SGD>(model, cfg.momentum, cfg.nesterov, cfg.weight_decay);
  if (cfg.kind == "adamw") o = std::make_unique<AdamW>(model, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
  if (o) {
    o->set_clip_grad_norm(cfg.clip_grad_norm);
    o->set_decay_filter(cfg.decay);
    return o;
  }
  std::string valid;
  for (const auto& k : optimizer_kinds()) valid += (valid.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown optimizer kind '" + cfg.kind + "' (valid: " + valid + ")");
}

}  // namespace codistill
