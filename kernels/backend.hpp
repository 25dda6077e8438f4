#pragma once
// Compute backends behind one interface (ggml's model): memory, queues, copies and the op
// entry points, with supports(op, dtype) to ask what a backend implements. Backends are
// listed explicitly in one place (kernels/registry.cpp); nothing registers itself.
//
// A Queue is an ordered stream of work on one device, created by its backend: every op
// and copy is queued on one and runs in queue order (the CPU runs it at once; CUDA queues
// it on a stream). A queue owns what its ops need per stream (CUDA: cuBLAS and cuDNN
// handles, workspaces, plan caches) and frees it with itself. Two queues are ordered only
// through events: record() on the producer, wait() on the consumer.
//
// The op entry points take tensors on the queue's device, in a dtype the backend supports
// for that op, with the shapes and semantics of the CPU reference (kernels/cpu/*.hpp and
// kernels/ops.hpp). Each refuses an (op, dtype) its backend does not support
// (require_support, naming both); shapes are the layers' to check (codistill/nn validates,
// then dispatches once). Gradients are accumulated (dw += ...): zeroing them is the
// caller's explicit zero() on the same queue. The one exception is linear_backward with
// accumulate = false, which writes dw and db (a step's first backward, Model::zero_grad_lazily).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "kernels/dtype.hpp"
#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"

namespace codistill::kernels {

class Backend;

// One teacher of Backend::linear_distill_head: its hidden states [N, H_k] and its head
// ([V, H_k] weight, [V] bias or null); H_k is its own (a teacher may be another architecture).
struct HeadTeacher {
  const Tensor* hidden = nullptr;
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;
};

// What an optimizer update reads when that is not what it writes: the state before the
// update, in tensors laid out like the ones written (same numel, dtype and device) and in
// memory of their own (not overlapping the written tensors). Null members are read in
// place. An out-of-place update is how an asynchronous checkpoint keeps the state of its
// step without copying it (codistill/persist/checkpointing.hpp): on the CPU, for arrays of
// kStreamMinBytes (32 MiB) and more, it moves about the bytes of an update in place
// (streaming stores, kernels/cpu/optimizer.cpp); below, the written lines are read first.
struct UpdateSource {
  const Tensor* value = nullptr;
  const Tensor* m = nullptr;  // sgd: momentum; adamw: m
  const Tensor* v = nullptr;  // adamw: v
};
// Throws std::invalid_argument naming op and the member when a set member is not laid out
// like its written tensor (numel, dtype, device) or shares memory with any written tensor
// (m, v null: the update writes no such tensor).
void check_update_source(const UpdateSource& from, const Tensor& value, const Tensor* m, const Tensor* v,
                         const char* op);

// A point in a queue: everything queued before record() has run once it is reached.
class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // the host waits
  virtual bool ready() = 0;        // reached already (never throws "not ready")
};

struct QueueOptions {
  bool allow_tf32 = false;  // CUDA: GEMMs and convolutions may use TF32 tensor cores
  bool reference = false;   // CPU: run the plain reference loops (tests), not the fast path
  // The GEMMs of this queue's float32 ops (linear, the fused head's student logits and
  // gradients): float32, or bf16 operands with float32 accumulation (kernels/ops.hpp).
  // A backend that cannot refuses the queue (Backend::supports_compute).
  Compute compute = Compute::f32;
  // The caller's promise that the weights this queue's ops read are not written once an op
  // has read them, for the queue's lifetime: a forward-only teacher's, written once at
  // upload. A backend may then keep converted copies of them (bf16-rounded and repacked
  // for its matmul on the CPU) keyed by their memory. Never set for a model that trains.
  bool frozen_params = false;
};

class Queue {
 public:
  virtual ~Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  Backend& backend() const { return backend_; }
  Device device() const { return device_; }
  const QueueOptions& options() const { return options_; }

  virtual void synchronize() = 0;                  // the host waits for everything queued
  virtual std::unique_ptr<Event> make_event() = 0;  // an event of this queue's device
  virtual void record(Event& event) = 0;           // event: after everything queued so far
  virtual void wait(Event& event) = 0;             // work queued later waits for event

  // dst <- src (same numel and dtype; each on this queue's device or the CPU), ordered on
  // this queue. A no-op when both share one buffer (Backend::staging_for on the CPU).
  // From/to ordinary host memory the host may wait; from staging memory it does not.
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  virtual void zero(Tensor& t) = 0;  // t on this queue's device

  // The backend's own handle of this queue's stream, opaque: a cudaStream_t on CUDA, null
  // where queued work runs at once on the host (the CPU). For a library outside the backend
  // that must order its own device work with this queue's (the nccl process group, which
  // the engine hands it to); a void pointer so that no backend type appears here.
  virtual void* native_stream() const { return nullptr; }

 protected:
  Queue(Backend& backend, Device device, QueueOptions options)
      : backend_(backend), device_(device), options_(options) {}

 private:
  Backend& backend_;
  Device device_;
  QueueOptions options_;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;  // "cpu", "cuda": the device spelling
  virtual DeviceKind kind() const = 0;
  // Devices this backend can use here (0 when built without it or without hardware), and
  // why not when there are none.
  virtual int device_count() const = 0;
  virtual std::string unavailable_reason() const { return {}; }
  virtual bool supports(Op op, DType dtype) const = 0;
  // Whether its queues can compute GEMMs this way (QueueOptions::compute); make_queue
  // refuses one it cannot.
  virtual bool supports_compute(Compute c) const { return c == Compute::f32; }
  // Whether its image ops take channels-last (NHWC) maps: Conv2dShape::channels_last, and
  // global_avgpool with channels > 1 (batch norm needs nothing: an NHWC map is the [rows,
  // channels] case of BatchNormShape, batch = B*H*W, spatial = 1).
  virtual bool supports_channels_last() const { return false; }
  // The host threads its work runs on (the CPU backend: the OpenMP team of its fast paths,
  // with OpenBLAS kept to one thread); a backend that computes elsewhere has none to set.
  virtual void set_threads(int n) { (void)n; }
  virtual int threads() const { return 1; }

  // ---- memory (Tensor allocates through these) ----
  virtual std::shared_ptr<std::byte> allocate(std::size_t bytes, int device) = 0;
  // A host-visible tensor to exchange data with `device_tensor` through Queue::copy without
  // the host waiting on the copy itself: the tensor itself where device memory is host
  // memory (the copy is then a no-op), page-locked memory of its shape where it is not.
  virtual Tensor staging_for(const Tensor& device_tensor) = 0;
  // Synchronous copies and zeroing outside any queue (set-up paths: Tensor::copy_from,
  // Tensor::zero); they wait for the whole device first.
  virtual void copy_sync(Tensor& dst, const Tensor& src) = 0;
  virtual void zero_sync(Tensor& t) = 0;

  virtual std::unique_ptr<Queue> make_queue(Device device, QueueOptions options = {}) = 0;

  // ---- ops (see kernels/ops.hpp and kernels/cpu/*.hpp for the semantics) ----
  // y[M,N] = x[M,K] w[N,K]^T + b, then act (act != none needs Op::linear_activation;
  // pre receives the pre-activation when the activation's backward needs it: gelu).
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                              Activation act, Tensor* pre, Queue& q) = 0;
  // dx = dpre w (dx may be null), dw += dpre^T x, db += colsum(dpre) (db may be null), with
  // dpre = dy * act'(saved) (saved: y for relu, pre for gelu; dpre is scratch of dy's shape,
  // unused for act == none). accumulate = false writes dw and db instead of adding to them
  // (their old contents, NaN included, are never read): a step's first backward into
  // gradients nobody zeroed (Model::zero_grad_lazily).
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                               Tensor& dw, Tensor* db, Activation act, const Tensor* saved,
                               Tensor* dpre, bool accumulate, Queue& q) = 0;
  virtual void activation_forward(const Tensor& x, Tensor& y, Activation act, Queue& q) = 0;
  // saved: y for relu, x for gelu. dx may alias dy.
  virtual void activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx,
                                   Activation act, Queue& q) = 0;
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                              const Conv2dShape& s, Queue& q) = 0;
  virtual void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                               Tensor& dw, Tensor* db, const Conv2dShape& s, Queue& q) = 0;
  // argmax: int32 [B,C,OH,OW] for backends that route the gradient through it (the CPU);
  // others leave it alone and use x and y in backward. dx is overwritten.
  virtual void maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& argmax, const Pool2dShape& s,
                                 Queue& q) = 0;
  virtual void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& argmax,
                                  const Tensor& dy, Tensor& dx, const Pool2dShape& s, Queue& q) = 0;
  // Row softmax of x[M,N] (y may alias x); backward dx = y * (dy - sum(dy * y)).
  virtual void softmax_forward(const Tensor& x, Tensor& y, Queue& q) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Queue& q) = 0;
  virtual void multiply(const Tensor& x, const Tensor& m, Tensor& y, Queue& q) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y, Queue& q) = 0;  // y may alias a or b
  // y = act(a + b) (Op::add_activation; act must be relu; y may alias a or b): a residual sum
  // and the relu after it in one pass. A backend without it inherits this, which throws
  // naming the backend.
  virtual void add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, Queue& q);
  // student, grad: [N,V]; teachers: K tensors [N,V]; labels: int32 [N]. grad may alias the
  // student or be null (forward only). Returns on the host (waits for the queue).
  virtual DistillLossResult distill_loss(const Tensor& student, const std::vector<const Tensor*>& teachers,
                                         const Tensor& labels, Tensor* grad,
                                         const DistillLossParams& p, Queue& q) = 0;
  // The fused linear + distillation head (DistillHeadParams in kernels/ops.hpp): hidden
  // [N, H], weight [V, H], bias [V] (may be null), each teacher's hidden [N, H_k], weight
  // [V, H_k] and bias [V] (may be null), labels int32 [N]. dhidden [N, H] is overwritten;
  // dweight [V, H] and dbias [V] accumulate; each may be null, and with all three null only
  // the loss is computed. Never holds the logits of all N rows. Returns on the host (waits
  // for the queue). A bad label throws std::out_of_range before anything is written.
  virtual DistillLossResult linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                                const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                                Tensor* dhidden, Tensor* dweight, Tensor* dbias,
                                                const DistillHeadParams& p, Queue& q) = 0;
  // x, y: [batch, channels, spatial...]; gamma, beta, running_mean/var, save_mean/invstd:
  // [channels] (BatchNormShape in kernels/ops.hpp). Training updates the running
  // statistics; eval reads them. save_mean/save_invstd are for the backward.
  virtual void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                 Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                 bool training, const BatchNormShape& s, Queue& q) = 0;
  // dx may be null; dgamma and dbeta accumulate. `training` as in the forward.
  virtual void batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                  Tensor& dbeta, bool training, const BatchNormShape& s, Queue& q) = 0;
  // Batch norm with a fused activation (Op::batchnorm_activation; act must be relu): as
  // batchnorm_forward, y = act(batchnorm(x)); the backward takes y (that output) and dy of
  // it and does batchnorm_backward of dy * act'(y) in its own passes (kernels/ops.hpp). A
  // container fuses a BatchNorm -> ReLU pair only where supports() says so; a backend without
  // it inherits these, which throw naming the backend.
  virtual void batchnorm_activation_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                            Tensor& running_mean, Tensor& running_var, Tensor& y,
                                            Tensor& save_mean, Tensor& save_invstd, bool training, Activation act,
                                            const BatchNormShape& s, Queue& q);
  virtual void batchnorm_activation_backward(const Tensor& x, const Tensor& y, const Tensor& gamma,
                                             const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dy,
                                             Tensor* dx, Tensor& dgamma, Tensor& dbeta, bool training,
                                             Activation act, const BatchNormShape& s, Queue& q);
  // Synchronized batch norm (Op::batchnorm_sync; the three steps and their arithmetic in
  // kernels/ops.hpp). sums: float64 [2C + 1] on this backend's device. A backend without
  // it inherits these, which throw naming the backend.
  virtual void batchnorm_sums(const Tensor& x, const Tensor* dy, const Tensor& center, const Tensor* invstd,
                              Tensor& sums, const BatchNormShape& s, Queue& q);
  virtual void batchnorm_forward_synced(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        Tensor& running_mean, Tensor& running_var, const Tensor& sums, Tensor& y,
                                        Tensor& save_mean, Tensor& save_invstd, const BatchNormShape& s, Queue& q);
  virtual void batchnorm_backward_synced(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                         const Tensor& save_invstd, const Tensor& dy, const Tensor& local_sums,
                                         const Tensor& sums, Tensor* dx, Tensor& dgamma, Tensor& dbeta,
                                         const BatchNormShape& s, Queue& q);
  // Global average pooling over x viewed as [rows, spatial, channels]: y[r, c] = the mean of
  // x[r, :, c] (summed in order of the spatial index); backward dx[r, i, c] = dy[r, c] /
  // spatial (dx overwritten). NCHW maps: rows = B*C, channels = 1; channels-last (NHWC) maps:
  // rows = B, channels = C (only where supports_channels_last()).
  virtual void global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                                      std::int64_t channels, Queue& q) = 0;
  virtual void global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                                       std::int64_t channels, Queue& q) = 0;
  // x, y: [rows, features]; gamma, beta: [features]; save_mean/save_invstd: [rows]
  // (LayerNormShape in kernels/ops.hpp). dx may be null; dgamma and dbeta accumulate.
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 Tensor& save_mean, Tensor& save_invstd, const LayerNormShape& s, Queue& q) = 0;
  virtual void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                  const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                  Tensor& dbeta, const LayerNormShape& s, Queue& q) = 0;
  // ids int32 [rows], table [vocab, dim], y [rows, dim] (EmbeddingShape in kernels/ops.hpp).
  // Backward: dtable += scatter of dy by ids, deterministic (no atomics). An id out of range
  // throws std::out_of_range naming the row and the id.
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                                 Queue& q) = 0;
  virtual void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                                  Queue& q) = 0;
  // Causal self-attention core (AttentionShape in kernels/ops.hpp): qkv [B*T, 3D] -> y [B*T, D],
  // probs [B, H, T, T] saved for the backward. Backward: dqkv [B*T, 3D] overwritten;
  // scratch [B, H, T, T] is the backend's to use.
  virtual void attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s,
                                 Queue& q) = 0;
  virtual void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv,
                                  Tensor& scratch, const AttentionShape& s, Queue& q) = 0;
  // Flat tensors of equal numel; momentum may be null when SgdScalars::momentum == 0. The
  // update reads `from`'s tensors where they are set (out of place, UpdateSource) and writes
  // value, momentum, m and v; the tensors of `from` are left as they were.
  virtual void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum, const SgdScalars& s,
                          const UpdateSource& from, Queue& q) = 0;
  virtual void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v,
                            const AdamWScalars& s, const UpdateSource& from, Queue& q) = 0;
};

// ---- the registry (kernels/registry.cpp): every backend, in one explicit list ----
const std::vector<Backend*>& backends();
// The backend of a device kind (always present; it may have no usable device).
Backend& backend_for(DeviceKind kind);
inline Backend& backend_for(Device device) { return backend_for(device.kind); }
// The CPU backend's shared queues (fast path, or the reference loops), for work that has
// no queue of its own (a layer outside a model, tests). Synchronous like every CPU queue.
Queue& default_cpu_queue(bool reference = false);

// The shapes and dtypes of a linear_distill_head call (the backends call it first): throws
// std::invalid_argument("linear_distill_head (<backend>): <what is wrong>").
void check_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                        const std::vector<HeadTeacher>& teachers, const Tensor& labels, const Tensor* dhidden,
                        const Tensor* dweight, const Tensor* dbias, const char* backend);

// Throws std::invalid_argument("<what>: <op> is not supported for <dtype> on <backend>").
void require_support(const Backend& b, Op op, DType dtype, const char* what);

}  // namespace codistill::kernels
