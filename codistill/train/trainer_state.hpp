#pragma once
// The state of a Trainer, shared by its two halves: set-up (training.cpp, its phases in
// trainer_setup.cpp) and the run loop (run_loop.cpp). Private to train/
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <spdlog/logger.h>

#include "codistill/config/config.hpp"
#include "codistill/persist/checkpointing.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/train/modality.hpp"
#include "codistill/persist/metrics.hpp"
#include "codistill/persist/run_dir.hpp"
#include "codistill/train/memory_plan.hpp"
#include "codistill/train/step.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/train/training.hpp"
#include "codistill/persist/worker_owner.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"

namespace codistill {

// The worker's files in the run directory, rank 0's (the other ranks of a group have the
// paths and a metrics writer that writes nothing).
struct WorkerFiles {
  // First: released last, after the checkpoint writer, the metrics and the logs are done.
  std::unique_ptr<WorkerOwner> owner;
  RunPaths paths;
  std::unique_ptr<MetricsWriter> metrics;
};

// What learns: the data, the model on its device, its optimizer and step, and the state a
// checkpoint holds.
struct Learner {
  // The kind of data: its data, batch source, evaluation and metric fields. Declared before
  // the step: the step's batch source reads the data (and sampler) it holds.
  std::unique_ptr<Modality> modality;
  kernels::Device device;
  Model model;
  std::unique_ptr<Optimizer> optimizer;
  // Declared after the model: destroyed first, it waits for the model's queue before the
  // model's device memory is released. It owns the batch source.
  std::unique_ptr<TrainStep> step;
  WorkerState worker;  // what a checkpoint holds (borrowed pointers); worker.step counts completed steps
};

// A Trainer: what it is (config, options, its group), its files, its learner, and the two
// services around the step, each owning its own parts. Members are destroyed bottom up: the
// teachers and the checkpoint writer (which may borrow the model's blocks) before the
// learner, the learner before the logs, the owner file last.
struct Trainer::State {
  Config cfg;
  TrainOptions opts;
  std::shared_ptr<dist::ProcessGroup> group;  // never null ("single" for one process)
  bool lead = true;  // rank 0: owns the worker's files, writes checkpoints, evaluates
  WorkerFiles files;
  std::shared_ptr<spdlog::logger> log;
  Learner learner;
  std::unique_ptr<CheckpointManager> checkpoints;  // rank 0 only
  std::unique_ptr<TeacherPool> teachers;  // codistillation with peers' checkpoints, fixed teachers
  std::optional<MemoryPlan> memory_plan;  // made before the run directory is claimed
};

}  // namespace codistill
