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
#include <cstdint>
#include <memory>
#include <optional>
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
  // the trainer's set-up hands it to, codistill/train/group.cpp); a void pointer so that no backend type appears here.
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
  // Whether `op` runs here for dtype on a queue computing as `c` says: supports(op, dtype),
  // supports_compute(c), and op_computes(op, c), where a backend names an op whose own
  // kernels cannot honour c (CUDA's flash attention tiles are float32 only: bf16 compute is
  // refused there, not silently computed in float32). What callers choosing an op for a
  // queue ask (the trainer's set-up, the op driver).
  bool supports(Op op, DType dtype, Compute c) const {
    return supports(op, dtype) && supports_compute(c) && op_computes(op, c);
  }
  virtual bool op_computes(Op op, Compute c) const {
    (void)op, (void)c;
    return true;
  }
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
  // The memory of device `device` as its library reports it, for the memory plan: free and
  // total bytes, and the peak this process held there (-1 where not tracked). nullopt where
  // device memory is host memory (the CPU): the host's own numbers apply.
  struct DeviceMemory {
    std::int64_t free = -1;
    std::int64_t total = -1;
    std::int64_t peak = -1;
  };
  virtual std::optional<DeviceMemory> device_memory(int device) const {
    (void)device;
    return std::nullopt;
  }
  // The scratch memory a convolution of shape s takes on queue q (the library's workspace,
  // the operands' copies in the layout it wants), forward only or with backward, per slot:
  // a queue keeps its scratch in slots shared by every call, each grown to its largest use,
  // so what a model needs is the sum over slots of each slot's largest. For the memory plan;
  // empty where the backend keeps none. Builds (and caches) what the calls will use; runs nothing.
  virtual std::vector<std::int64_t> conv2d_workspace(const Conv2dShape& s, bool bias, bool backward, Queue& q) {
    (void)s, (void)bias, (void)backward, (void)q;
    return {};
  }
  // Synchronous copies and zeroing outside any queue (set-up paths: Tensor::copy_from,
  // Tensor::zero); they wait for the whole device first.
  virtual void copy_sync(Tensor& dst, const Tensor& src) = 0;
  virtual void zero_sync(Tensor& t) = 0;

  virtual std::unique_ptr<Queue> make_queue(Device device, QueueOptions options = {}) = 0;

  // ---- ops: one entry point per CODISTILL_ENTRY of kernels/op_list.def, which says what
  // each takes and does (kernels/ops.hpp and kernels/cpu/*.hpp: the semantics). An optional
  // one (CODISTILL_OPTIONAL_ENTRY) has a default that throws naming the backend
  // (kernels/registry.cpp), for backends without it.
#define CODISTILL_ENTRY(ret, name, params) virtual ret name params = 0;
#define CODISTILL_OPTIONAL_ENTRY(ret, name, params, cpu, cuda) virtual ret name params;
#include "kernels/op_list.def"
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
