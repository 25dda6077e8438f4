#pragma once
// Fine-tuning (model.init_from): a freshly built model takes the parameters and buffers of
// an existing checkpoint at step 0. Only those: the optimizer state, the step count, the
// sampler position and the dropout generators start fresh (from this run's seed), as in a
// new run whose initialization happens to be that checkpoint's weights. A run resuming from
// its own checkpoints ignores model.init_from (the trainer logs it): its own state wins.
#include <cstdint>
#include <string>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

struct InitSource {
  std::string path;  // the checkpoint file loaded
  int worker = 0;    // its worker and step, for the log
  std::int64_t step = 0;
  bool join = false;  // spec "peers": the worker joins the run at `step`
};

// model.init_from's value for a worker that joins a running run (docs/training.md, "An
// elastic cohort").
inline constexpr const char* kInitFromPeers = "peers";

// `spec` names a checkpoint file; a worker folder (worker-NNN: its freshest valid
// checkpoint); a run directory (its folder of worker `worker`, so that one config
// fine-tunes each worker of an ensemble from its counterpart); or "peers": the freshest
// valid checkpoint of the other workers of `run_dir`, this worker's own run, which it then
// joins at that checkpoint's step (InitSource::join; the trainer starts counting there, so
// its schedule and exchanges line up with its peers'). Loads that checkpoint's
// parameters and buffers into `model`, which must be the one `configured` describes.
// Throws ConfigError naming `key` (model.init_from, or worker_models.ID.init_from where the
// worker's model comes from there; exit 2) when the path does not exist, holds
// no readable checkpoint, or the checkpoint's model is not this one: the message names the
// architecture keys that differ and the first parameter whose name or shape differs.
InitSource init_model_from(Model& model, const ModelConfig& configured, const std::string& spec, int worker,
                           const std::string& run_dir, const std::string& key = "model.init_from");

}  // namespace codistill
