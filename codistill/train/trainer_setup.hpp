#pragma once
// A Trainer's set-up, phase by phase. The constructor (training.cpp) runs them in the order
// below (with the optimizer made between log_start and make_batch_source), and each relies
// on the ones before it: the refusals of the device, group, memory format, precision, a
// resume and model.init_from come before the first write to the run directory
// (claim_run_dir; train.fused_head and group.sync_batchnorm are refused after it, on the
// placed model), and the model is built, initialized and restored on the host before it
// moves to its device. Private to train/
#include <memory>
#include <optional>

#include "checkpoint/store.hpp"
#include "codistill/config/config.hpp"
#include "codistill/data/feed/batch_source.hpp"
#include "codistill/data/feed/data_identity.hpp"
#include "codistill/persist/init_from.hpp"
#include "codistill/train/trainer_state.hpp"

namespace codistill::setup {

// What a phase hands the later ones, beyond the Trainer's state.
struct Pending {
  ModelConfig mc;        // the worker's model, with its data's input shape and classes
  double load_s = 0;     // seconds the data took to open
  DataIdentity data_identity;  // what data this worker reads (worker-NNN/data.json)
  std::optional<checkpoint::LoadedCheckpoint> resume_from;
  std::optional<InitSource> init_source;  // model.init_from, where it applies
  std::unique_ptr<BatchSource> source;    // the step's batch source, until make_step takes it
  bool prefetch = false;                  // image batches prepared a step ahead
};

// The device (checked against its backend, the group, the memory format and the
// precisions), the thread count, the process group and whether this rank leads. Writes
// nothing.
void choose_device(Trainer::State& s);
// The console logger (train.log joins in claim_run_dir).
void make_logger(Trainer::State& s);
// The data and the model built on it (not yet restored, still on the host).
void load_data_and_model(Trainer::State& s, Pending& p);
// The checkpoint to resume from (rank 0 chooses, the others read the same file) and the
// refusals a resume can meet: another run in the directory, a finished worker, another
// group size.
void find_resume_point(Trainer::State& s, Pending& p);
// model.init_from, for a run that does not resume; a group takes rank 0's values.
void apply_init_from(Trainer::State& s, Pending& p);
// Rank 0 claims the worker's folder, prepares the run directory and opens train.log and
// metrics.jsonl; the other ranks write no files.
void claim_run_dir(Trainer::State& s, const Pending& p);
// What the run starts with, in the log: data, model, initialization, group.
void log_start(Trainer::State& s, Pending& p);
// The batch source (images or text windows) and the evaluation of the eval events.
void make_batch_source(Trainer::State& s, Pending& p);
// The worker state restored from the checkpoint, then the model moved to its device.
void restore_and_place(Trainer::State& s, Pending& p);
// The training step (its loss, micro-batches, teacher precision, fused head) and the run's
// first metrics event for text.
void make_step(Trainer::State& s, Pending& p);
// The checkpoint writer's start, and the teachers: fixed ones, and the peers' (resumed).
void start_teachers(Trainer::State& s, const Pending& p);

}  // namespace codistill::setup
