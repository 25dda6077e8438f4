#pragma once
// The state of a Trainer, shared by its two halves: set-up (training.cpp, its phases in
// trainer_setup.cpp) and the run loop (run_loop.cpp). Private to train/
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <spdlog/logger.h>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/persist/checkpointing.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/persist/metrics.hpp"
#include "codistill/persist/run_dir.hpp"
#include "codistill/train/step.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/train/training.hpp"
#include "codistill/persist/worker_owner.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"

namespace codistill {

struct Trainer::State {
  Config cfg;
  TrainOptions opts;
  std::shared_ptr<dist::ProcessGroup> group;  // never null ("single" for one process)
  bool lead = true;  // rank 0: owns the worker's files, writes checkpoints, evaluates
  // First member: released last, after the checkpoint writer and the logs are done.
  std::unique_ptr<WorkerOwner> owner;
  RunPaths paths;
  std::shared_ptr<spdlog::logger> log;
  std::unique_ptr<MetricsWriter> metrics;
  data::Splits data;  // images (empty for data.kind text)
  std::optional<TextData> text;  // data.kind text: the prepared folder
  std::unique_ptr<data::text::EvalWindows> eval_windows;  // data.kind text: the held-out windows
  // The eval events' measure of a model (the student or a teacher): images or held-out
  // windows; predictions (for churn) per example or per token.
  std::function<EvalResult(Model&, std::vector<std::int32_t>*)> evaluate;
  kernels::Device device;
  Model model;
  std::unique_ptr<Optimizer> optimizer;
  // Images: the sampler the step's batch source draws from (declared before the step, so
  // that it outlives it).
  std::unique_ptr<data::BatchSampler> sampler;
  // Declared after the model: destroyed first, it waits for the model's queue before the
  // model's device memory is released. It owns the batch source.
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<CheckpointManager> checkpoints;  // rank 0 only
  std::unique_ptr<TeacherPool> teachers;  // codistillation with peers' checkpoints
  WorkerState worker;  // what a checkpoint holds; worker.step counts completed steps
};

}  // namespace codistill
