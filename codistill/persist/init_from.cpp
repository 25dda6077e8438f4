#include "codistill/persist/init_from.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/naming.hpp"
#include "checkpoint/source.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/persist/worker_state.hpp"

namespace codistill {

namespace {

[[noreturn]] void fail(const std::string& key, const std::string& detail) { throw ConfigError(key, "", 0, detail); }

checkpoint::ReadOptions read_options() {
  checkpoint::ReadOptions o;
  o.optimizer = false;  // a fine-tuned run starts its optimizer and state fresh
  o.state = false;
  return o;
}

// The freshest readable checkpoint of `worker` in run directory `run_dir`.
checkpoint::LoadedCheckpoint freshest(const std::string& key, const std::string& spec, const std::string& run_dir,
                                      int worker) {
  const checkpoint::RunStore store(run_dir);
  auto loaded = store.load_freshest(worker, read_options());
  if (!loaded) {
    const auto files = store.checkpoints(worker);
    fail(key, files.empty()
                  ? fmt::format("'{}' holds no checkpoint (no ckpt-*.h5 in {})", spec, store.worker_dir(worker))
                  : fmt::format("'{}': none of the {} checkpoints in {} can be read (newest {})", spec,
                                files.size(), store.worker_dir(worker), files.back().path));
  }
  return std::move(*loaded);
}

// The freshest valid checkpoint among the other workers of `run_dir` (a joining worker's).
checkpoint::LoadedCheckpoint freshest_peer(const std::string& key, const std::string& run_dir, int worker) {
  const checkpoint::RunStore store(run_dir);
  std::optional<checkpoint::CheckpointFile> best;
  for (int w : store.workers())
    if (w != worker)
      if (auto f = store.freshest_valid(w); f && (!best || f->step > best->step)) best = f;
  // Read again: a checkpoint pruned in between falls back to that worker's next freshest.
  std::optional<checkpoint::LoadedCheckpoint> loaded;
  if (best) loaded = store.load_freshest(best->worker, read_options());
  if (!loaded)
    fail(key, fmt::format("'{}': no other worker of run directory {} has published a valid checkpoint yet (a worker "
                          "joins a running run from its peers' freshest; start it later, or without "
                          "model.init_from to start from scratch)",
                          kInitFromPeers, run_dir));
  return std::move(*loaded);
}

checkpoint::LoadedCheckpoint load(const std::string& key, const std::string& spec, int worker,
                                  const std::string& run_dir) {
  if (spec == kInitFromPeers) return freshest_peer(key, run_dir, worker);
  checkpoint::CheckpointSource src;
  try {
    src = checkpoint::classify_source(spec);
  } catch (const std::invalid_argument& e) {
    fail(key, fmt::format("'{}': {}", spec, e.what()));
  }
  using Kind = checkpoint::CheckpointSource::Kind;
  if (src.kind == Kind::file) {
    checkpoint::LoadedCheckpoint c;
    try {
      c.data = checkpoint::read(spec, read_options());
    } catch (const std::exception& e) {
      fail(key, fmt::format("'{}' is not a readable checkpoint: {}", spec, e.what()));
    }
    c.file = {static_cast<int>(c.data.meta.worker), c.data.meta.step, spec};
    return c;
  }
  // A worker folder stands for itself; from a run directory this worker's own folder.
  if (src.kind == Kind::worker_dir) return freshest(key, spec, src.run_dir, src.worker);
  if (std::find(src.workers.begin(), src.workers.end(), worker) == src.workers.end()) {
    std::vector<std::string> names;
    for (int w : src.workers) names.push_back(checkpoint::worker_dir_name(w));
    fail(key, fmt::format("run directory '{}' has no folder of this worker ({}; it has {}): name a worker folder "
                          "or a checkpoint file instead",
                          spec, checkpoint::worker_dir_name(worker), fmt::join(names, ", ")));
  }
  return freshest(key, spec, src.run_dir, worker);
}

// Why a checkpoint's model is not `model`: the architecture keys and the first parameter
// (or buffer) that differ.
std::string model_mismatch(Model& model, const ModelConfig& configured, const checkpoint::CheckpointData& d) {
  std::string why;
  try {
    const ModelConfig theirs = model_from_yaml(d.meta.model, "checkpoint model attribute");
    const auto keys = model_differences(theirs, configured);
    if (!keys.empty()) why += fmt::format("; model keys differ (checkpoint vs config): {}", fmt::join(keys, ", "));
  } catch (const std::exception& e) {
    why += fmt::format("; its model attribute cannot be read ({})", e.what());
  }
  const auto params = model.params();
  for (std::size_t i = 0; i < params.size() || i < d.params.size(); ++i) {
    if (i >= d.params.size()) {
      why += fmt::format("; the checkpoint has no parameter {}", params[i].path);
      break;
    }
    if (i >= params.size()) {
      why += fmt::format("; the model has no parameter {}", d.params[i].name);
      break;
    }
    if (params[i].path != d.params[i].name || params[i].value->shape() != d.params[i].shape) {
      why += fmt::format("; parameter {}: checkpoint {} {}, model {} {}", i, d.params[i].name,
                         kernels::shape_str(d.params[i].shape), params[i].path,
                         kernels::shape_str(params[i].value->shape()));
      break;
    }
  }
  return why;
}

}  // namespace

InitSource init_model_from(Model& model, const ModelConfig& configured, const std::string& spec, int worker,
                           const std::string& run_dir, const std::string& key) {
  checkpoint::LoadedCheckpoint c = load(key, spec, worker, run_dir);
  const auto& meta = c.data.meta;
  if (meta.model_fingerprint != model.fingerprint())
    fail(key, fmt::format("checkpoint {} holds another model (fingerprint {}, the configured model has {}){}",
                          c.file.path, meta.model_fingerprint, model.fingerprint(),
                          model_mismatch(model, configured, c.data)));
  try {
    copy_model_state(model, c.data);
  } catch (const std::exception& e) {
    fail(key, fmt::format("checkpoint {}: {}", c.file.path, e.what()));
  }
  return {c.file.path, static_cast<int>(meta.worker), meta.step, spec == kInitFromPeers};
}

}  // namespace codistill
