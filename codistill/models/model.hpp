#pragma once
// A model: a tree of modules under one Sequential root, its parameters, gradients and
// buffers in one arena (codistill/nn/arena.hpp), and the queue it runs on. Parameter
// paths are the module paths, e.g. "fc1/weight" [out, in] or "block1/body/conv1/weight":
// the names checkpoints use (DESIGN.md section 5).
// A model starts on the CPU (the fast path); to_device moves the arena in one copy per
// block and gives the model a queue of that device's backend, on which everything it does
// is queued without waiting: synchronize() waits for it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codistill/models/model_options.hpp"
#include "codistill/nn/arena.hpp"
#include "codistill/nn/module.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/nn/trainable.hpp"

namespace codistill {

class Model : public Trainable {
 public:
  Model();
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // Appends a module to the root (before the arena is built: finalize()).
  void add(std::string name, ModulePtr module);
  Sequential& root() override { return *root_; }
  // Lays the parameters out in the arena (build_model calls it; first use does otherwise).
  void finalize();

  // x: [B, C, H, W] (or [B, F]) -> logits [B, classes], x and logits on the model's device.
  // The logits are the last module's output — its own buffer, or its input where it passes
  // through (Flatten, an inactive Dropout) — valid until this model's next forward (no
  // allocation and no copy per step): a caller that keeps them clones them.
  kernels::Tensor forward(const kernels::Tensor& x, bool training);
  // dlogits: [B, classes]; accumulates parameter grads (writes them, after
  // zero_grad_lazily). The input gradient is not computed.
  void backward(const kernels::Tensor& dlogits);
  // fn(first) during backward/backward_features each time more gradients are final: every
  // element of the arena's gradient block from offset `first` (in elements) to its end
  // will not change again in this backward (the root's children run last to first and own
  // ascending ranges of the arena; a parameter shared with an earlier child, as a tied
  // head's, counts as that child's). Work queued on the model's queue before the call has
  // produced them. Null: no calls.
  void set_gradients_ready(std::function<void(std::int64_t first)> fn);
  // Zeroes every gradient: one zero of the arena's gradient block on the model's queue.
  void zero_grad();
  // The same for the next backward, without touching the block where every module with
  // parameters can_overwrite_grads (an MLP's Linears): each then writes its gradients in
  // its first backward instead of adding to them, which saves the zeroing pass and the
  // GEMMs' read of the zeros (2-7% of fmnist_mlp's CPU step, docs/results.md). Any such
  // module whose backward did not run has its gradients zeroed at the end of the next
  // backward. Otherwise (a convolution, a norm, an embedding: they add) this is
  // zero_grad(). Not for the fused head's path, whose loss adds into the head's gradients
  // before backward_features (which throws std::logic_error after this).
  void zero_grad_lazily();

  // A model whose last module is a linear map to its logits (a Linear without a fused
  // activation, or a TiedLinear) can hand that map to a fused loss (Backend::
  // linear_distill_head), which never holds the [rows, classes] logits: the weight [classes,
  // features], the bias (or null) and their gradients (null in a forward-only copy).
  struct LinearHead {
    const kernels::Tensor* weight = nullptr;
    kernels::Tensor* weight_grad = nullptr;
    const kernels::Tensor* bias = nullptr;
    kernels::Tensor* bias_grad = nullptr;
  };
  std::optional<LinearHead> linear_head();
  // Everything but the head: x -> features [rows, features] (the head's input; its buffer,
  // valid until the next forward); and backward from the features' gradient (parameter
  // gradients accumulate; the head's own are the fused loss's to add). Throws
  // std::logic_error when the model has no linear head.
  kernels::Tensor forward_features(const kernels::Tensor& x, bool training);
  void backward_features(const kernels::Tensor& dfeatures);

  std::vector<NamedParam> params();
  std::vector<NamedBuffer> buffers();
  ParamArena& arena() override;
  std::int64_t num_params();
  // Hash (FNV-1a, hex) of the ordered parameter paths and shapes: two models with equal
  // fingerprints can exchange checkpoints. With fingerprint_modules set (model kind
  // `layers`) the hash goes on over every module path in tree order, so that layers without
  // parameters (an activation, a pooling, a dropout: "3_relu", named by index and type)
  // count too: two layer lists that differ in any layer type or position differ here.
  std::string fingerprint();
  void set_fingerprint_modules(bool on) { fingerprint_modules_ = on; }
  // CPU only: float64 for gradient checks, float32 for training.
  void to_dtype(kernels::DType dtype);
  // CPU only: run the plain reference loops (tests) instead of the fast path.
  void set_reference(bool reference);

  // Moves the arena to `device` and runs every module on a new queue of its backend
  // (QueueOptions: TF32). Checked first, so that a refusal leaves the model where it was.
  void to_device(kernels::Device device, kernels::QueueOptions options = {});
  // The same placement without copying the values: the caller fills the blocks (a teacher
  // uploading through staging memory on the model's queue). On the same device the values
  // stay as they are.
  void to_device_uninitialized(kernels::Device device, kernels::QueueOptions options = {});
  // A forward-only model (a teacher): releases the gradient block; backward then throws.
  void drop_grads();
  // A forward-only model holding its matrices as bf16 (ParamArena::to_bf16_matrices; a
  // teacher with codistill.teacher_weights: bf16): drops the gradients, on the host. It then
  // runs only on a queue computing in bf16 (QueueOptions::compute) of a backend with the
  // bf16-weight ops (Op::linear_bf16_weights, Op::embedding_bf16_table): to_device checks.
  void to_bf16_weights();
  kernels::Device device() const;
  kernels::Queue& queue() const override;
  // Host waits for everything queued on the model's queue.
  void synchronize() const override;
  std::string summary();  // one line per module, indented by depth: name, kind, output shape, params

  // How image maps lie in memory between the layers (codistill/nn/channels_last.hpp):
  // "auto" (channels-last where the architecture allows it and the backend supports it,
  // NCHW otherwise), "nchw", or "nhwc" (required: refused with the reason where it cannot
  // be). build_model says whether the architecture allows it (every image layer of the
  // tree switchable and an input of one channel, whose NCHW and NHWC bytes are the same).
  // Applied now and again on every device move; never changes parameters or checkpoints.
  // Throws std::invalid_argument for another name or an "nhwc" that cannot be.
  void set_memory_format(const std::string& format);
  void set_channels_last_allowed(bool allowed) { channels_last_allowed_ = allowed; }
  // Whether the image layers run channels-last now.
  bool channels_last() const { return channels_last_; }

  // Activation recomputation (train.recompute): "none", or "blocks": every module its
  // builder marked a block of the body (Module::mark_block: gpt's transformer blocks, the
  // residual blocks of resnet and layers) keeps only its input through a training forward
  // and reruns its forward for its own backward (Module::set_recompute). Teachers never
  // train, so it changes nothing for them. Throws std::invalid_argument for another name,
  // or "blocks" on a model without blocks (naming the kind's builder).
  void set_recompute(const std::string& mode);
  const std::string& recompute() const { return recompute_; }
  // The modules that recompute (0 with "none").
  int recompute_blocks();

  // Forwards without gradients (teachers, evaluation): every block keeps only its output
  // (Module::set_release_in_eval), its internals going to a pool: on the CPU the thread's
  // (nn::BufferPool::for_this_thread: K teachers run one after another share one block's
  // working set), on a device the model's own. On by default where the blocks are all of one
  // shape (uniform_blocks: a GPT's body): the pool reuses buffers of one size only, so a
  // ResNet's stages would each keep a working set there, and keep their buffers as before.
  // Off keeps every buffer.
  void set_release_in_eval(bool on);
  bool uniform_blocks();

  // Input shape without the batch dimension (set by build_model; summary() uses it).
  void set_input_shape(kernels::Shape shape) { input_shape_ = std::move(shape); }
  const kernels::Shape& input_shape() const { return input_shape_; }
  // The dtype of the model's input: float32 (images, features), or int32 (gpt: token ids
  // [B, T], logits [B*T, vocab], row b*T + t predicting token t+1 of sequence b). Set by
  // build_model; to_dtype does not change it.
  void set_input_dtype(kernels::DType dtype) { input_dtype_ = dtype; }
  kernels::DType input_dtype() const { return input_dtype_; }
  // Modules with their own random stream (dropout), by module path. A checkpoint saves
  // rng->state() of each and a resume calls rng->set_state(...).
  std::vector<std::pair<std::string, Rng*>> rngs();

 private:
  void place(kernels::Device device, kernels::QueueOptions options, bool copy);
  // Whether the image layers should run channels-last on `backend` (throws for an "nhwc"
  // that cannot be), and setting them.
  bool wants_channels_last(const kernels::Backend& backend) const;
  void apply_channels_last(bool on);
  // Gives the blocks the pool of a forward without gradients on this thread and device.
  void use_eval_pool();
  void leave_eval_pool();
  // After a backward: zeroes the gradients of modules still marked stale by zero_grad_lazily.
  void zero_stale_grads();
  // After a backward that threw: zeroes every gradient if zero_grad_lazily marked them.
  void abandon_stale_grads();

  std::unique_ptr<Sequential> root_;
  std::unique_ptr<kernels::Queue> queue_;  // null: the CPU's shared queue
  ParamArena arena_;
  bool finalized_ = false;
  bool fingerprint_modules_ = false;
  kernels::Shape input_shape_;
  kernels::DType input_dtype_ = kernels::DType::f32;
  std::string memory_format_ = "auto";
  bool channels_last_allowed_ = false;
  bool channels_last_ = false;
  std::string recompute_ = "none";
  bool release_chosen_ = false;  // set_release_in_eval was called: finalize keeps its choice
  void apply_release_in_eval(bool on);
  std::shared_ptr<nn::BufferPool> eval_pool_;    // the blocks' now (null: to be chosen)
  std::shared_ptr<nn::BufferPool> device_pool_;  // the model's own, off the CPU
  const kernels::Queue* pool_queue_ = nullptr;   // the queue device_pool_ serves
  std::vector<Module*> param_modules_;  // modules with parameters, pre-order (finalize())
  bool all_overwrite_grads_ = false;    // every one of them can_overwrite_grads
  bool grads_stale_ = false;  // zero_grad_lazily marked modules that no backward has run on yet
  bool ready_hook_ = false;   // set_gradients_ready holds a function
};

// Builds the model of cfg.kind ("mlp" | "cnn" | "resnet" | "layers" | "gpt"), initialized from rng. cfg.input_shape and
// cfg.classes must be filled (from the data). Unknown kinds throw std::invalid_argument
// listing the valid ones; impossible shapes throw with the layer that cannot be built
// (kind layers: a ConfigError naming model.layers[i], see models/layers_model.hpp).
Model build_model(const ModelConfig& cfg, Rng& rng);
std::vector<std::string> model_kinds();

}  // namespace codistill
