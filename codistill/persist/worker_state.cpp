#include "codistill/persist/worker_state.hpp"

#include <stdexcept>

#include "codistill/config/config_loader.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

using checkpoint::Section;
using checkpoint::TensorRef;
using checkpoint::TensorValue;

StateView make_state_view(const WorkerState& w) {
  StateView sv;
  auto& v = sv.view;
  v.meta.worker = w.worker;
  v.meta.step = w.step;
  v.meta.examples_seen = w.examples_seen;
  v.meta.model = w.model_yaml;
  v.meta.model_fingerprint = w.model->fingerprint();
  v.meta.config = w.config_yaml;
  v.meta.teacher_steps = w.teacher_steps;
  // Each block seen from the host: borrowed where it is host memory, else copied on the
  // model's queue (ordered after the step that wrote it) and waited for.
  Model& m = *w.model;
  kernels::Queue& q = m.queue();
  auto host_block = [&](const kernels::Tensor& block) -> const kernels::Tensor& {
    kernels::Tensor h = q.backend().staging_for(block);
    q.copy(h, block);
    return sv.host.emplace_back(std::move(h));
  };
  ParamArena& arena = m.arena();
  const kernels::Tensor& host_values = host_block(arena.values());
  sv.borrows_live_blocks = host_values.same_memory(arena.values());  // slots live where the values do
  for (const ArenaEntry& e : arena.param_entries())
    v.params.push_back(TensorRef::of(e.path, sv.host.emplace_back(ParamArena::view(host_values, e))));
  if (!arena.buffer_entries().empty()) {
    // The buffers are the one block the next step writes before the snapshot is waited
    // for (phase 7): BatchNorm updates its running statistics in the forward (phase 3).
    // A borrowed host block would race the asynchronous copy, so buffers (small) are
    // always copied here, while the step is still ours.
    const kernels::Tensor* host_buffers = &host_block(arena.buffers());
    if (host_buffers->same_memory(arena.buffers())) host_buffers = &sv.host.emplace_back(arena.buffers().clone());
    for (const ArenaEntry& e : arena.buffer_entries())
      v.buffers.push_back(TensorRef::of(e.path, sv.host.emplace_back(ParamArena::view(*host_buffers, e))));
  }
  for (auto& [path, slots] : w.optimizer->state())
    for (auto& [slot, tensor] : slots) v.optimizer.push_back(TensorRef::of(path + "/" + slot, host_block(*tensor)));
  q.synchronize();

  auto add_i64 = [&](const std::string& name, std::vector<std::int64_t> values) {
    v.state.push_back(TensorRef::of(name, sv.i64.emplace_back(std::move(values))));
  };
  add_i64("optimizer/step", {w.optimizer->steps_taken()});
  for (auto& [name, values] : w.source->checkpoint_state()) add_i64("sampler/" + name, std::move(values));
  for (auto& [name, rng] : w.model->rngs()) {
    auto s = rng->state();
    v.state.push_back(TensorRef::of("rng/" + name, sv.u64.emplace_back(s.begin(), s.end())));
  }
  v.state.push_back(TensorRef::of(
      "data/normalization", sv.f64.emplace_back(std::vector<double>{w.normalization.shift, w.normalization.scale})));
  return sv;
}

namespace {

const TensorValue& require(const checkpoint::CheckpointData& d, Section s, const std::string& name,
                           std::int64_t numel = -1) {
  const TensorValue* t = d.find(s, name);
  if (!t)
    throw std::runtime_error(std::string("checkpoint has no /") + checkpoint::section_group(s) + "/" + name);
  if (numel >= 0 && t->numel() != numel)
    throw std::runtime_error(std::string("checkpoint entry /") + checkpoint::section_group(s) + "/" + name +
                             " has " + std::to_string(t->numel()) + " elements, expected " +
                             std::to_string(numel));
  return *t;
}

}  // namespace

// Parameters and buffers from the file into the model (wherever it is), by path and shape.
void copy_model_state(Model& model, const checkpoint::CheckpointData& d) {
  for (auto& p : model.params()) {
    const TensorValue& t = require(d, Section::params, p.path);
    if (t.shape != p.value->shape())
      throw std::runtime_error("checkpoint parameter " + p.path + " has shape " + kernels::shape_str(t.shape) +
                               ", the model expects " + kernels::shape_str(p.value->shape()));
    p.value->copy_from(t.real);
  }
  for (auto& b : model.buffers()) {
    const TensorValue& t = require(d, Section::buffers, b.path, b.value->numel());
    b.value->copy_from(t.real);
  }
}

void restore_state(WorkerState& w, const checkpoint::CheckpointData& d) {
  w.model->synchronize();  // nothing queued may still use the tensors overwritten here
  copy_model_state(*w.model, d);
  for (auto& [path, slots] : w.optimizer->state())
    for (auto& [slot, tensor] : slots)
      tensor->copy_from(require(d, Section::optimizer, path + "/" + slot, tensor->numel()).real);
  w.optimizer->set_steps_taken(require(d, Section::state, "optimizer/step", 1).values<std::int64_t>()[0]);

  w.source->restore([&](const std::string& name, std::int64_t numel) {
    const auto v = require(d, Section::state, "sampler/" + name, numel).values<std::int64_t>();
    return std::vector<std::int64_t>(v.begin(), v.end());
  });
  for (auto& [name, rng] : w.model->rngs()) {
    auto s = require(d, Section::state, "rng/" + name, 4).values<std::uint64_t>();
    rng->set_state({s[0], s[1], s[2], s[3]});
  }
  w.step = d.meta.step;
  w.examples_seen = d.meta.examples_seen;
  w.teacher_steps = d.meta.teacher_steps;
}

Model model_from_checkpoint(const checkpoint::CheckpointData& d, const ModelFactory& factory) {
  ModelConfig mc = model_from_yaml(d.meta.model, "checkpoint model attribute");
  Rng unused = Rng::placeholder();  // parameters are overwritten from the file right away
  Model model = factory ? factory(mc, unused) : build_model(mc, unused);
  if (model.fingerprint() != d.meta.model_fingerprint)
    throw std::runtime_error("model rebuilt from the checkpoint's model attribute has fingerprint " +
                             model.fingerprint() + ", the checkpoint says " + d.meta.model_fingerprint);
  copy_model_state(model, d);
  return model;
}

data::Normalization normalization_from_checkpoint(const checkpoint::CheckpointData& d) {
  data::Normalization n;
  if (const TensorValue* t = d.find(Section::state, "data/normalization"); t && t->numel() == 2) {
    auto v = t->values<double>();
    n.shift = v[0];
    n.scale = v[1];
    n.kind = "stored";
  }
  return n;
}

}  // namespace codistill
