#pragma once
// Modules: a model is a tree of them. Leaves (Layer) compute; containers (Sequential,
// Residual) route tensors between children. Explicit forward and backward, no autograd:
// forward keeps what backward needs; backward takes dL/dy, accumulates dL/dparams into
// the grads (or writes them once after Model::zero_grad_lazily, see can_overwrite_grads)
// and returns dL/dx.
//
// Dispatch happens once, here: Module::forward/backward (not virtual) check that the input
// is on the module's device in the module's dtype, then call the subclass, which calls the
// op entry points of its queue's backend (kernels/backend.hpp). No module branches on the
// device: a queue on another backend is all it takes to run elsewhere.
//
// Buffers: forward and backward return tensors that share the module's own output/gradient
// buffers (reused while the shape is unchanged, so a training step does not allocate);
// they stay valid until the module's next forward/backward. forward keeps a reference to
// its input where backward needs it, so the input must not change before backward.
//
// Parameters, grads and non-trainable buffers are tensors the module owns by name
// (params(), buffers()); inside a Model they are views into the model's one arena
// (codistill/nn/arena.hpp), bound once the tree is complete.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

namespace codistill {

class Rng;
namespace nn {
class BufferPool;
}

// A named trainable tensor and its gradient, owned by the module.
struct Param {
  std::string name;  // local name within the module: "weight", "bias"
  kernels::Tensor* value;
  kernels::Tensor* grad;
};

// A named non-trainable tensor (e.g. BatchNorm running statistics): saved in checkpoints,
// loaded by teachers, never touched by the optimizer.
struct Buffer {
  std::string name;
  kernels::Tensor* value;
};

// What one training step keeps in a module's own buffers (Module::plan_activations), in
// bytes: `forward` is what its forward allocates (outputs, what backward reads), `backward`
// what only its backward allocates (input and pre-activation gradients); `output` is the
// full shape (batch first) of what it returns. The memory plan (codistill/train/
// memory_plan.hpp) sums them over the tree; a module's own plan follows its do_forward and
// do_backward, so a new buffer there belongs here too (tests/codistill/nn/test_activation_plan.cpp).
// `workspace` is the backend's scratch for the module's ops per slot (Backend::
// conv2d_workspace), shared by every module on one queue: containers take each slot's
// largest, not the sum; workspace_bytes() is what the queue then holds.
struct ActivationBytes {
  ActivationBytes() = default;
  // {forward, backward, output} as most modules give them (no workspace, nothing transient).
  ActivationBytes(std::int64_t f, std::int64_t b, kernels::Shape out, std::vector<std::int64_t> ws = {},
                  std::int64_t t = 0)
      : forward(f), backward(b), output(std::move(out)), workspace(std::move(ws)), transient(t) {}
  std::int64_t forward = 0;
  std::int64_t backward = 0;
  kernels::Shape output;
  std::vector<std::int64_t> workspace;
  // Held only while one module runs (a recomputed block's internals, rebuilt for its own
  // backward and dropped after it: Module::set_recompute): containers take the largest.
  std::int64_t transient = 0;
  std::int64_t total() const { return forward + backward + transient; }
  std::int64_t workspace_bytes() const {
    std::int64_t sum = 0;
    for (std::int64_t b : workspace) sum += b;
    return sum;
  }
  // A child's buffers added to these (the output stays this one's).
  void add(const ActivationBytes& child) {
    forward += child.forward;
    backward += child.backward;
    transient = std::max(transient, child.transient);
    merge_workspace(child.workspace);
  }
  void merge_workspace(const std::vector<std::int64_t>& other) {
    if (workspace.size() < other.size()) workspace.resize(other.size(), 0);
    for (std::size_t i = 0; i < other.size(); ++i) workspace[i] = std::max(workspace[i], other[i]);
  }
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual std::string kind() const = 0;

  // training = true enables dropout and keeps what backward needs.
  kernels::Tensor forward(const kernels::Tensor& x, bool training);
  // need_dx = false lets the first module with parameters skip the input gradient.
  kernels::Tensor backward(const kernels::Tensor& dy, bool need_dx = true);
  // The dtype forward takes when it is not the parameters' (token ids: int32); nullopt (the
  // default) means the parameters' dtype. Backward always takes dy in the parameters' dtype.
  virtual std::optional<kernels::DType> input_dtype() const { return std::nullopt; }
  // Output shape for an input shape without the batch dimension ([C,H,W] or [F]).
  virtual kernels::Shape output_shape(const kernels::Shape& input) const = 0;

  // The buffers a forward (and with `training`, a backward) of input x keep in this
  // module and its children (full shape, batch first; need_dx as backward's). The default
  // is a leaf's output and input gradient in its parameters' float32; modules that keep
  // more, less or other shapes say so.
  virtual ActivationBytes plan_activations(const kernels::Shape& x, bool training, bool need_dx);
  // What containers and the memory plan ask for: plan_activations, or where the block
  // releases its internals (releases()) those as `transient` (one block's at a time), with
  // the output held in training (recompute) and the input held while it runs otherwise.
  ActivationBytes plan(const kernels::Shape& x, bool training, bool need_dx);

  // ---- activation recomputation (train.recompute: blocks) ----
  // A block of the model's body (a transformer block, a residual block), marked by its
  // builder: the unit Model::set_recompute applies to.
  void mark_block() { block_ = true; }
  bool is_block() const { return block_; }
  // With recompute on, forward drops the buffers of this subtree once it has its output and,
  // in training, keeps only its input and its random streams' states; backward reruns the
  // forward from them (the same dropout masks, batch-norm statistics left as the first
  // forward left them), then runs its own backward and drops the buffers again. Gradients
  // are bit for bit those without it: the same kernels run on the same inputs.
  // `pool` (shared by a model's blocks: codistill/nn/buffer_pool.hpp) keeps the buffers
  // dropped for the next block to take; null: they go back to the backend.
  void set_recompute(bool on, std::shared_ptr<nn::BufferPool> pool = nullptr);
  bool recompute() const { return recompute_; }
  // ---- forwards without gradients (teachers, evaluation) ----
  // A block's forward with training = false keeps only its output: its internals go (to the
  // pool set_eval_pool gave it, else back to the backend) once the output exists, so a
  // forward-only model holds about one block's working set, not every block's. The outputs
  // are bit for bit those of keeping them: the same kernels run on the same inputs. On by
  // default; off keeps every buffer as a training forward does (tests compare the two).
  void set_release_in_eval(bool on) { release_in_eval_ = on; }
  // Whether a forward (training or not) of this module drops its internals after it.
  bool releases(bool training) const { return block_ && (recompute_ || (!training && release_in_eval_)); }
  // The pool this subtree's buffers go to and come from in such forwards (Model::forward
  // picks it); a recomputed block keeps its own.
  void set_eval_pool(const std::shared_ptr<nn::BufferPool>& pool) {
    if (!recompute_) set_pool(pool);
  }
  // Drops the buffers forward and backward keep (outputs, saved inputs, gradients) in this
  // subtree; the next forward allocates them again. Leaves that keep buffers override it
  // (and call this for their children); tensors already returned stay valid (shared).
  virtual void release_activations();

  // ---- the tree ----
  using ChildFn = std::function<void(const std::string& name, Module& child)>;
  virtual void for_each_child(const ChildFn& /*fn*/) {}
  // This module's own parameters and buffers (not its children's).
  virtual std::vector<Param> params() { return {}; }
  virtual std::vector<Buffer> buffers() { return {}; }
  // The module's own random stream (dropout masks), or null; checkpointed by path.
  virtual Rng* rng() { return nullptr; }
  // Re-initializes own parameters from rng (kaiming_uniform | kaiming_normal | xavier_uniform).
  virtual void init_params(Rng& /*rng*/, const std::string& /*init*/) {}

  // ---- where it runs (recursive over the subtree) ----
  // Runs on queue q from now on (the queue outlives the module's use of it). Parameters
  // are not moved: Model::to_device moves the arena and then calls this.
  void set_queue(kernels::Queue& q);
  kernels::Queue& queue() const { return *queue_; }
  kernels::Backend& backend() const { return queue_->backend(); }
  kernels::Device device() const { return queue_->device(); }
  // CPU only: the reference loops (tests) or the fast path.
  void set_reference(bool reference);
  // Standalone use (a module outside a model, tests): converts its own parameters, grads
  // and buffers to dtype (f32 for training, f64 for gradient checks), recursively.
  void to_dtype(kernels::DType dtype);
  // True when this module or a descendant has parameters.
  bool has_params();
  // The dtype the module computes in: its own parameters' (f32 when it has none, or where
  // they are bf16 storage, ParamArena::to_bf16_matrices).
  kernels::DType param_dtype();

  // ---- gradients left unzeroed (Model::zero_grad_lazily) ----
  // True for a module whose backward can write its own parameters' gradients instead of
  // adding to them (Linear): then a step need not zero them first, which saves a pass
  // over the gradients and the GEMMs' read of them.
  virtual bool can_overwrite_grads() const { return false; }
  // Model::zero_grad_lazily marks such modules: their gradients hold stale values that the
  // next backward must overwrite. Model::backward zeroes the gradients of any module still
  // marked after it (one whose backward did not run).
  void set_grads_stale(bool stale) { grads_stale_ = stale; }
  bool grads_stale() const { return grads_stale_; }

 protected:
  virtual kernels::Tensor do_forward(const kernels::Tensor& x, bool training) = 0;
  virtual kernels::Tensor do_backward(const kernels::Tensor& dy, bool need_dx) = 0;
  // After set_queue: a container re-decides fusions its backend supports.
  virtual void queue_changed() {}
  // Reallocates buf only when shape, dtype or device change (see codistill/nn/buffer.hpp);
  // inside a recomputed block an undefined buf is first taken from the block's pool.
  kernels::Tensor& ensure(kernels::Tensor& buf, const kernels::Shape& shape, kernels::DType dtype);
  // For release_activations: lets buf go (to the pool inside a recomputed block).
  void drop(kernels::Tensor& buf);
  // In do_backward of a module that can_overwrite_grads: true once after set_grads_stale(true)
  // (write the gradients), false otherwise (add to them).
  bool take_stale_grads() { return std::exchange(grads_stale_, false); }

 private:
  kernels::Tensor forward_recomputed(const kernels::Tensor& x, bool training);
  kernels::Tensor backward_recomputed(const kernels::Tensor& dy, bool need_dx);
  void set_pool(const std::shared_ptr<nn::BufferPool>& pool);  // this subtree's

  kernels::Queue* queue_ = &kernels::default_cpu_queue();
  bool grads_stale_ = false;
  bool block_ = false;
  bool recompute_ = false;
  bool release_in_eval_ = true;
  // Recompute: forward's input and the subtree's random streams before and after it.
  kernels::Tensor recompute_input_;
  std::vector<std::array<std::uint64_t, 4>> rng_before_, rng_after_;
  std::shared_ptr<nn::BufferPool> pool_;  // set in a recomputed block's subtree
};

// Leaves. (A separate name so that the code says which modules compute.)
class Layer : public Module {};

using ModulePtr = std::unique_ptr<Module>;
using LayerPtr = std::unique_ptr<Module>;

// Paths are "<child>/<grandchild>/.../<name>", e.g. "fc1/weight", "block1/conv1/weight".
struct NamedParam {
  std::string path;
  kernels::Tensor* value;
  kernels::Tensor* grad;
};
struct NamedBuffer {
  std::string path;
  kernels::Tensor* value;
};
// Depth-first, children in order, a module's own entries before its children's.
std::vector<NamedParam> collect_params(Module& root);
std::vector<NamedBuffer> collect_buffers(Module& root);
// Modules with their own random stream, by module path.
std::vector<std::pair<std::string, Rng*>> collect_rngs(Module& root);
// fn(path, module) for every module below root (root itself excluded), pre-order.
void visit_modules(Module& root, const std::function<void(const std::string&, Module&)>& fn);

}  // namespace codistill
