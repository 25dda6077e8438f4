#pragma once
// The resolved configuration of a run (DESIGN.md section 8; every key is documented in
// docs/config.md). Parsing and strict validation live in config_loader.*.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codistill/config/layer_spec.hpp"

namespace codistill {

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs/run";
  std::uint64_t seed = 1;
  int worker = 0;
  int workers = 1;
  int threads = 2;  // OpenMP threads for CPU kernels
};

// Training-time augmentation (codistill/data/augment.hpp): training batches only.
struct AugmentConfig {
  std::int64_t crop_padding = 0;  // random crop of the image padded by this many pixels; 0 = off
  bool flip = false;              // random horizontal flip (label-preserving for clothes, not digits)
};

struct DataConfig {
  std::string kind = "fashion-mnist";  // fashion-mnist | idx | synthetic | text
  // The dataset's folder; kind text: a folder made by codistill-prepare-text
  // (tokenizer.bpe, train.tokens, valid.tokens; docs/text-data.md).
  std::string path = "/usr/share/datasets/fashion-mnist";
  // kind idx: the four files (gzip or raw IDX), relative to path unless absolute.
  std::string train_images = "train-images-idx3-ubyte.gz";
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string test_images = "t10k-images-idx3-ubyte.gz";
  std::string test_labels = "t10k-labels-idx1-ubyte.gz";
  int batch_size = 128;
  std::string shard = "disjoint";  // disjoint | full | same
  std::string normalize = "standard";  // standard (dataset mean/std) | unit ([0,1]) | none
  std::int64_t train_limit = 0;  // use only the first N training examples (0 = all)
  std::int64_t test_limit = 0;   // likewise for the test split (kind text: held-out windows)
  // kind text: T, the tokens of context of each training and evaluation window (a window
  // holds T + 1 tokens: T inputs, T next-token targets). model.seq_len for a gpt.
  std::int64_t context = 128;
  // kind synthetic: a Gaussian mixture, one component per class.
  std::int64_t synthetic_train = 8192;
  std::int64_t synthetic_test = 2048;
  int synthetic_classes = 10;
  std::vector<std::int64_t> synthetic_shape = {1, 8, 8};
  double synthetic_noise = 1.0;  // std of each component around its mean
  std::uint64_t synthetic_seed = 7;  // the mixture itself, shared by all workers
  AugmentConfig augment;
  // Prepare the next training batch (gather + augmentation) on a helper thread while the
  // current step computes: auto | true | false (auto: on for a device, on the CPU only
  // when the step's threads leave a core free). The batches are the same either way.
  std::string prefetch = "auto";
};

struct ModelConfig {
  std::string kind = "mlp";  // mlp | cnn | resnet | layers | gpt
  std::vector<std::int64_t> hidden = {256, 256};  // fully connected widths
  std::vector<std::int64_t> channels = {32, 64};  // cnn: conv output channels, one per block;
                                                  // resnet: the width of each stage
  std::int64_t blocks = 1;                         // resnet: basic blocks per stage; gpt: transformer blocks
  std::int64_t kernel_size = 5;                    // cnn: square kernel, 'same' padding
  std::int64_t pool = 2;                           // cnn: max-pool window and stride
  std::string activation = "relu";                 // relu | gelu
  double dropout = 0.0;                            // before each hidden linear layer's output
  std::string init = "kaiming_uniform";            // kaiming_uniform | kaiming_normal | xavier_uniform
  std::vector<LayerSpec> layers;                   // layers: the whole model, layer by layer
  // gpt (codistill/models/gpt_model.hpp):
  std::int64_t vocab_size = 0;      // tokens; 0 = from the data (classes)
  std::int64_t seq_len = 128;       // T: the model takes int32 [B, T]
  std::int64_t d_model = 128;       // width of the token rows
  std::int64_t heads = 4;           // attention heads (divide d_model)
  std::int64_t mlp_ratio = 4;       // MLP hidden width = mlp_ratio * d_model
  bool tie_embeddings = false;      // true is refused for now (untied head only)
  // Fine-tuning: a checkpoint file, or a worker or run directory (its freshest valid
  // checkpoint), whose parameters and buffers replace the initialization at step 0. Not
  // part of the architecture: not in model_fields(), so not in a checkpoint's `model`.
  std::string init_from;  // "" = off
  // How image maps lie in memory: auto | nchw | nhwc (Model::set_memory_format). Not part of
  // the architecture either: the parameters and checkpoints are the same in every format.
  std::string memory_format = "auto";
  // Filled from the data, not from the config file:
  std::vector<std::int64_t> input_shape;  // [C, H, W]
  std::int64_t classes = 0;
};

struct ScheduleConfig {
  std::string kind = "constant";  // constant | step | exponential | cosine | cyclical | sgdr
  std::int64_t warmup_steps = 0;  // linear warm-up from 0 to lr
  std::int64_t step_size = 1000;  // step, exponential: lr is multiplied by gamma every step_size steps
  double gamma = 0.1;             // step, exponential: the factor per step_size steps
  double min_lr = 0.0;            // cosine, exponential, cyclical, sgdr: the floor
  std::int64_t half_cycle_steps = 1000;   // cyclical: steps from min_lr up to lr (half a cycle)
  std::string cycle_mode = "triangular";  // cyclical: triangular | triangular2 (height halves each cycle)
  std::int64_t restart_steps = 1000;      // sgdr: length of the first cosine period (T_0)
  std::int64_t restart_mult = 1;          // sgdr: each period this many times the one before (T_mult)
};

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adamw
  double lr = 0.05;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  ScheduleConfig schedule;
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
};

struct CheckpointConfig {
  std::int64_t every = 1000;  // 0: only at the end
  int keep = 3;
  bool async = true;
  std::string on_busy = "wait";  // wait | skip: a request while a write is in flight
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
  // Frozen teachers for classic distillation, beside or instead of live peers: checkpoint
  // files, worker directories or run directories (their workers' freshest valid
  // checkpoints), resolved once when the run starts (teachers/fixed_teachers.hpp).
  std::vector<std::string> fixed_teachers;
  // The teachers' matrix products (their forwards, and their logits in the fused head):
  // same (as train.precision) | float32 | bf16.
  std::string teacher_precision = "same";
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
