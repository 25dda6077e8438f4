#pragma once
// The CUDA backend's classes (kernels/cuda/backend.cu: memory, queues, events;
// kernels/cuda/backend_ops.cu: the op entry points). Internal to kernels/cuda/: the rest
// of the code sees only kernels::Backend through cuda_backend() (kernels/cuda/backend.hpp).
#include <cuda_runtime.h>

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

class CudaBackend final : public kernels::Backend {
 public:
  const char* name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  int device_count() const override;
  std::string unavailable_reason() const override;
  bool supports(Op op, DType dtype) const override;
  // float32, and bf16 mixed precision (bf16 cublasGemmEx operands, float32 accumulation).
  bool supports_compute(Compute /*c*/) const override { return true; }

  std::shared_ptr<std::byte> allocate(std::size_t bytes, int device) override;
  Tensor staging_for(const Tensor& device_tensor) override;
  void copy_sync(Tensor& dst, const Tensor& src) override;
  void zero_sync(Tensor& t) override;
  std::unique_ptr<kernels::Queue> make_queue(Device device, QueueOptions options) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Activation act,
                      Tensor* pre, kernels::Queue& q) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                       Tensor* db, Activation act, const Tensor* saved, Tensor* dpre, bool accumulate,
                       kernels::Queue& q) override;
  void activation_forward(const Tensor& x, Tensor& y, Activation act, kernels::Queue& q) override;
  void activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx, Activation act,
                           kernels::Queue& q) override;
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                      const Conv2dShape& s, kernels::Queue& q) override;
  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                       Tensor* db, const Conv2dShape& s, kernels::Queue& q) override;
  void maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& argmax, const Pool2dShape& s,
                         kernels::Queue& q) override;
  void maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& argmax, const Tensor& dy,
                          Tensor& dx, const Pool2dShape& s, kernels::Queue& q) override;
  void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, bool training,
                         const BatchNormShape& s, kernels::Queue& q) override;
  void batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& dy, Tensor* dx, Tensor& dgamma, Tensor& dbeta, bool training,
                          const BatchNormShape& s, kernels::Queue& q) override;
  void batchnorm_activation_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                    Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                    bool training, Activation act, const BatchNormShape& s,
                                    kernels::Queue& q) override;
  void batchnorm_activation_backward(const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, bool training, Activation act, const BatchNormShape& s,
                                     kernels::Queue& q) override;
  void global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                              std::int64_t channels, kernels::Queue& q) override;
  void global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                               std::int64_t channels, kernels::Queue& q) override;
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                         Tensor& save_invstd, const LayerNormShape& s, kernels::Queue& q) override;
  void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& dy, Tensor* dx, Tensor& dgamma, Tensor& dbeta, const LayerNormShape& s,
                          kernels::Queue& q) override;
  void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                         kernels::Queue& q) override;
  void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                          kernels::Queue& q) override;
  void attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s,
                         kernels::Queue& q) override;
  void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv, Tensor& scratch,
                          const AttentionShape& s, kernels::Queue& q) override;
  void softmax_forward(const Tensor& x, Tensor& y, kernels::Queue& q) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, kernels::Queue& q) override;
  void multiply(const Tensor& x, const Tensor& m, Tensor& y, kernels::Queue& q) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y, kernels::Queue& q) override;
  void add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, kernels::Queue& q) override;
  DistillLossResult distill_loss(const Tensor& student, const std::vector<const Tensor*>& teachers,
                                 const Tensor& labels, Tensor* grad, const DistillLossParams& p,
                                 kernels::Queue& q) override;
  DistillLossResult linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                        const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                        Tensor* dhidden, Tensor* dweight, Tensor* dbias,
                                        const DistillHeadParams& p, kernels::Queue& q) override;
  void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum, const kernels::SgdScalars& s,
                  const UpdateSource& from, kernels::Queue& q) override;
  void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v,
                    const kernels::AdamWScalars& s, const UpdateSource& from, kernels::Queue& q) override;

 private:
  // The queue as this backend's own (throws std::invalid_argument for another backend's).
  CudaQueue& queue_of(kernels::Queue& q, const char* what) const;
};

}  // namespace codistill::kernels::cuda
