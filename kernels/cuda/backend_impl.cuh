#pragma once
// The CUDA backend's classes (kernels/cuda/backend.cu: memory, queues, events; each op's
// entry points at the end of its launchers' file, kernels/cuda/<op>.cu). Internal to
// kernels/cuda/: the rest of the code sees only kernels::Backend through cuda_backend()
// (kernels/cuda/backend.hpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/cuda/backend.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/handle.cuh"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {

// A timing-free event of one device, recorded on its queues' streams (reached at once
// until first recorded); destroyed with the object (the driver keeps it until it has been
// reached if work is still pending).
class CudaEvent final : public kernels::Event {
 public:
  explicit CudaEvent(int device);

  void synchronize() override;
  bool ready() override;
  int device() const { return device_; }
  cudaEvent_t handle() const { return event_.get(); }

 private:
  int device_;
  EventHandle event_;
};

// A stream on one device with everything its ops need (StreamResources), all freed with
// the queue after its stream has drained.
class CudaQueue final : public kernels::Queue {
 public:
  CudaQueue(Backend& backend, Device device, QueueOptions options);
  ~CudaQueue() override = default;  // ~StreamResources synchronizes, then frees

  void synchronize() override;
  std::unique_ptr<kernels::Event> make_event() override;
  void record(kernels::Event& event) override;  // a CudaEvent of this queue's device
  void wait(kernels::Event& event) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void zero(Tensor& t) override;
  void* native_stream() const override { return stream(); }

  // What the kernels of kernels/cuda/*.hpp take: device, stream, TF32 and the resources.
  Context context() { return resources_->context(); }
  cudaStream_t stream() const { return resources_->stream(); }

 private:
  std::unique_ptr<StreamResources> resources_;
};

// One tensor argument of an op entry point as its kernels use it: `count` elements of
// `type` (CudaBackend::enter checks it). A null tensor is an optional argument left out.
struct TensorArg {
  TensorArg(const Tensor& t, std::int64_t count, const char* what, DType type = DType::f32)
      : tensor(&t), numel(count), name(what), dtype(type) {}
  TensorArg(const Tensor* t, std::int64_t count, const char* what, DType type = DType::f32)
      : tensor(t), numel(count), name(what), dtype(type) {}
  const Tensor* tensor;
  std::int64_t numel;
  const char* name;
  DType dtype;
};

class CudaBackend final : public kernels::Backend {
 public:
  const char* name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  int device_count() const override;
  std::string unavailable_reason() const override;
  using kernels::Backend::supports;  // (op, dtype, compute) as well
  bool supports(Op op, DType dtype) const override;
  // Flash attention's tile kernels compute in float32 whatever the queue's compute
  // (kernels/cuda/sequence/flash_attention.hpp): under bf16 they run, unrounded, so they do not
  // honour bf16's rounding (the op driver's bf16 cases leave them out).
  bool op_computes(Op op, Compute c) const override { return op != Op::flash_attention || c == Compute::f32; }
  // float32, and bf16 mixed precision (bf16 cublasGemmEx operands, float32 accumulation).
  bool supports_compute(Compute /*c*/) const override { return true; }

  std::shared_ptr<std::byte> allocate(std::size_t bytes, int device) override;
  Tensor staging_for(const Tensor& device_tensor) override;
  // The driver's free memory plus this process's cached free blocks, and the allocator's peak.
  std::optional<DeviceMemory> device_memory(int device) const override;
  void copy_sync(Tensor& dst, const Tensor& src) override;
  void zero_sync(Tensor& t) override;
  std::unique_ptr<kernels::Queue> make_queue(Device device, QueueOptions options) override;

  // The op entry points of kernels/op_list.def, each defined in its op's kernels/cuda/<op>.cu
  // (softmax's, which refuse, in backend.cu).
#define CODISTILL_ENTRY(ret, name, params) ret name params override;
#define CODISTILL_OPTIONAL_ENTRY(ret, name, params, cpu, cuda) CODISTILL_IF_##cuda(ret name params override;)
#include "kernels/op_list.def"

 private:
  // The prologue of every op entry point, so that an entry is this call and its launch:
  // q as this backend's queue (std::invalid_argument naming `what` for another backend's),
  // (op, dtype) supported (require_support), then each of args on q's device in its dtype
  // with its element count (ops::expect, entry.cuh), in order. An entry that
  // validates its shape first passes no args and calls ops::expect after its validation.
  CudaQueue& enter(kernels::Queue& q, Op op, DType dtype, const char* what,
                   std::initializer_list<TensorArg> args = {}) const;
};

}  // namespace codistill::kernels::cuda
