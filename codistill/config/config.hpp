#pragma once
// The resolved configuration of a run (DESIGN.md section 8; every key is documented in
// docs/config.md). Parsing and strict validation live in config_loader.*. The sections of
// the layers below config are their own option structs (data/data_options.hpp,
// models/model_options.hpp, optim/optimizer_options.hpp), so that data, models and optim
// never see the rest of the config.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codistill/data/data_options.hpp"
#include "codistill/models/model_options.hpp"
#include "codistill/optim/optimizer_options.hpp"

namespace codistill {

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs/run";
  std::uint64_t seed = 1;
  int worker = 0;
  int workers = 1;  // this worker's view of the cohort at start: its data shard, the peers it expects
  int threads = 2;  // OpenMP threads for CPU kernels
  // Leave the cohort for good after this step (0: never): a final checkpoint, then the
  // retirement marker (persist/retirement.hpp). Per worker, like run.worker.
  std::int64_t retire_at = 0;
};

struct TrainConfig {
  std::int64_t steps = 1000;
  // Gradient accumulation: each step's data.batch_size examples go through the model in
  // this many equal micro-batches whose gradients are summed before the one update, so a
  // step means the same with any value (less memory for activations, not another batch).
  std::int64_t micro_batches = 1;
  std::int64_t eval_every = 500;  // 0: only at the end
  std::int64_t log_every = 50;
  std::int64_t eval_batch_size = 1000;
  // CUDA: let float32 GEMMs and convolutions use TF32 tensor cores (faster, about 1e-3
  // relative error instead of float32's); off by default so CUDA stays close to the CPU.
  bool allow_tf32 = false;
  // The model's linear head applied inside the loss (Backend::linear_distill_head): rows in
  // chunks, never the [rows, classes] logits of the student or its teachers. For large
  // vocabularies (language models); the model and its teachers must end in a linear head.
  bool fused_head = false;
  // The student's matrix products: float32, or bf16 (mixed precision: bf16 operands,
  // float32 accumulation; weights, gradients, optimizer state and losses stay float32).
  std::string precision = "float32";  // float32 | bf16
  // Activation recomputation: "none", or "blocks": each block of the model's body keeps only
  // its input through forward and reruns its forward for its own backward (Model::
  // set_recompute): activations of about the blocks' inputs plus one block's internals, for
  // about one more forward of the blocks per step. Gradients are the same bits.
  std::string recompute = "none";  // none | blocks
  // The memory the run may use, checked against its memory plan before the first step
  // (codistill/train/memory_plan.hpp): "auto" (what the host or device has available),
  // "off", or a size ("12GiB", "800MB", bytes).
  std::string memory_limit = "auto";
};

struct CheckpointConfig {
  std::int64_t every = 1000;  // 0: only at the end
  int keep = 3;
  bool async = true;
  std::string on_busy = "wait";  // wait | skip: a request while a write is in flight
  // Teacher files beside the checkpoints (parameters and buffers only, what a peer reads):
  // none | float32 | bf16. float32 by default: peers read a third of an AdamW checkpoint,
  // and learn from exactly the same numbers as from the checkpoint.
  std::string teacher_dtype = "float32";
  std::int64_t teacher_every = 1;  // beside every k-th checkpoint (and the last one)
};

// The teacher gate (teachers/teacher_gate.hpp): a peer's checkpoint teaches only if its
// mean cross-entropy on a fixed probe of this worker's held-out data is finite and within
// the bounds below. A model at most accept_below nats is good by any measure and is never
// refused by the ratio (a student near 0 loss would otherwise refuse nearly every peer).
struct GateConfig {
  bool enabled = true;
  std::int64_t probe = 0;     // label rows scored (examples; tokens, in whole windows); 0: the data's
                              // default (Modality::probe_rows: 128 examples, 1024 tokens)
  double max_ratio = 2.0;     // refused above max_ratio x the student's own probe loss (0: no ratio bound)
  double max_loss = 0.0;      // refused above this many nats whatever the student's (0: no absolute bound)
  double accept_below = 0.1;  // never refused by the ratio at or below this many nats
};

struct CodistillConfig {
  bool enabled = false;
  std::int64_t burn_in = 0;
  std::int64_t reload_every = 50;
  double weight = 1.0;       // a
  double hard_weight = 1.0;  // h
  double temperature = 1.0;  // T
  int teachers = 0;          // 0: all peers
  std::int64_t max_staleness = 0;  // 0: unbounded
  std::string mode = "async";      // async | sync
  double sync_timeout_s = 600;
  // Sync mode advances once this many live peers have published the step it waits for
  // (0: all of them); those left behind keep their previous teacher.
  int sync_quorum = 0;
  // A retired peer's checkpoints: teach (stay usable as teachers) | drop.
  std::string retired = "teach";
  // Frozen teachers for classic distillation, beside or instead of live peers: checkpoint
  // files, worker directories or run directories (their workers' freshest valid
  // checkpoints), resolved once when the run starts (teachers/fixed_teachers.hpp).
  std::vector<std::string> fixed_teachers;
  // The teachers' matrix products (their forwards, and their logits in the fused head):
  // same (as train.precision) | float32 | bf16.
  std::string teacher_precision = "same";
  // How teachers hold their matrices (Linear weights, embedding tables, a tied head):
  // float32 | bf16 (2 bytes per parameter; needs bf16 teacher products).
  std::string teacher_weights = "float32";
  // A worker group's ranks on one node share each peer teacher's parameters read-only
  // through a file of share_dir: auto (where 2 or more ranks are on a node) | off.
  std::string share_teachers = "auto";
  std::string share_dir = "/dev/shm";
  GateConfig gate;
};

// The worker's process group (codistill/dist/): how its ranks find each other and
// exchange gradients. The rank count is the launcher's (mpirun -np R), never the config's:
// the same file runs as one process or as a group of any size.
struct GroupConfig {
  std::string kind = "auto";    // auto (mpi under mpirun/srun, else single) | single | mpi | nccl
  double timeout_s = 300;       // deadline of each collective (a dead or hung rank)
  double bucket_mb = 25;        // gradient all-reduce bucket size, MiB
  bool sync_batchnorm = false;  // BatchNorm statistics over the group's ranks (CPU backend)
};

struct Config {
  RunConfig run;
  GroupConfig group;
  std::string device = "cpu";
  DataConfig data;
  ModelConfig model;
  // Workers that train another model than `model` (a mixed cohort: an MLP codistilling
  // with a ResNet), by worker id; each entry is a whole model section (defaults for the
  // keys it leaves out, not model's values). Set in the file only (no --set path).
  std::map<int, ModelConfig> worker_models;
  OptimizerConfig optimizer;
  TrainConfig train;
  CheckpointConfig checkpoint;
  CodistillConfig codistill;
};

// The model section worker `worker` trains: its worker_models entry, else `model`.
inline const ModelConfig& model_of(const Config& c, int worker) {
  auto it = c.worker_models.find(worker);
  return it == c.worker_models.end() ? c.model : it->second;
}

}  // namespace codistill
