// CPU-only build: the device entry points exist and say clearly why they cannot work.
#include <stdexcept>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/avgpool.hpp"
#include "kernels/cuda/backend.hpp"
#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/conv2d.hpp"
#include "kernels/cuda/distill_head.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/linear.hpp"
#include "kernels/cuda/memory.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace codistill::kernels::cuda {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("codistill was built without CUDA: this build has no CUDA backend "
                           "(configure with CODISTILL_CUDA=ON on a machine with nvcc)");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
void* device_malloc(std::size_t, int) { no_cuda(); }
void device_free(void*, int) noexcept {}
void memcpy_host_to_device(void*, const void*, std::size_t, int) { no_cuda(); }
void memcpy_device_to_host(void*, const void*, std::size_t, int) { no_cuda(); }
void memcpy_device_to_device(void*, const void*, std::size_t, int) { no_cuda(); }
void memset_zero(void*, std::size_t, int) { no_cuda(); }
void synchronize(int) { no_cuda(); }

// context.hpp
struct Stream::Impl {};
Stream::Stream(int) { no_cuda(); }
Stream::~Stream() = default;
int Stream::device() const { no_cuda(); }
void* Stream::handle() const { no_cuda(); }
void* Stream::resources() const { no_cuda(); }
void Stream::synchronize() const { no_cuda(); }
struct Event::Impl {};
Event::Event(int) { no_cuda(); }
Event::~Event() = default;
void Event::record(void*) { no_cuda(); }
void Event::wait(void*) const { no_cuda(); }
bool Event::ready() const { no_cuda(); }
void Event::synchronize() const { no_cuda(); }
void stream_synchronize(const Context&) { no_cuda(); }

// allocator.hpp
void* cached_malloc(std::size_t, int) { no_cuda(); }
void cached_free(void*, int) noexcept {}
AllocatorStats allocator_stats(int) { return {}; }
void empty_cache(int) {}
void* pinned_malloc(std::size_t) { no_cuda(); }
void pinned_free(void*) noexcept {}
void memcpy_async(void*, const void*, std::size_t, CopyKind, const Context&) { no_cuda(); }

// linear.hpp
void linear_forward(const float*, const float*, const float*, float*, std::int64_t, std::int64_t,
                    std::int64_t, const Context&) { no_cuda(); }
void linear_backward(const float*, const float*, const float*, float*, float*, float*, std::int64_t,
                     std::int64_t, std::int64_t, bool, const Context&) { no_cuda(); }

// bias_activation.hpp
void bias_activation_forward(float*, const float*, float*, std::int64_t, std::int64_t, Activation,
                             const Context&) { no_cuda(); }
void bias_activation_backward(const float*, const float*, float*, float*, std::int64_t, std::int64_t,
                              Activation, bool, const Context&) { no_cuda(); }
void activation_forward(const float*, float*, std::int64_t, Activation, const Context&) { no_cuda(); }
void activation_backward(const float*, const float*, float*, std::int64_t, Activation,
                         const Context&) { no_cuda(); }
void bias_add_channels(float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                       const Context&) { no_cuda(); }
void bias_grad_channels(const float*, float*, std::int64_t, std::int64_t, std::int64_t, bool,
                        const Context&) { no_cuda(); }
void multiply(const float*, const float*, float*, std::int64_t, const Context&) { no_cuda(); }
void add(const float*, const float*, float*, std::int64_t, const Context&) { no_cuda(); }

// conv2d.hpp
void conv2d_forward(const float*, const float*, const float*, float*, const Conv2dShape&,
                    const Context&) { no_cuda(); }
void conv2d_backward(const float*, const float*, const float*, float*, float*, float*,
                     const Conv2dShape&, bool, const Context&) { no_cuda(); }
void maxpool2d_forward(const float*, float*, const Pool2dShape&, const Context&) { no_cuda(); }
void maxpool2d_backward(const float*, const float*, const float*, float*, const Pool2dShape&,
                        const Context&) { no_cuda(); }

// avgpool.hpp
void global_avgpool_forward(const float*, float*, std::int64_t, std::int64_t, const Context&) { no_cuda(); }
void global_avgpool_backward(const float*, float*, std::int64_t, std::int64_t, const Context&) { no_cuda(); }

// layernorm.hpp
void layernorm_forward(const float*, const float*, const float*, float*, float*, float*, const LayerNormShape&,
                       const Context&) { no_cuda(); }
void layernorm_backward(const float*, const float*, const float*, const float*, const float*, float*, float*, float*,
                        const LayerNormShape&, const Context&) { no_cuda(); }

// batchnorm.hpp
void batchnorm_forward(const float*, const float*, const float*, float*, float*, float*, float*, float*, bool,
                       const BatchNormShape&, const Context&) { no_cuda(); }
void batchnorm_backward(const float*, const float*, const float*, const float*, const float*, float*, float*,
                        float*, bool, const BatchNormShape&, const Context&) { no_cuda(); }

// optimizer.hpp
void sgd_step(const std::vector<ParamSlice>&, const SgdScalars&, const Context&) { no_cuda(); }
void adamw_step(const std::vector<ParamSlice>&, const AdamWScalars&, const Context&) { no_cuda(); }

// distill_loss.hpp
DistillLossResult distill_loss(const float*, const float* const*, int, const std::int32_t*,
                               float*, std::int64_t, std::int64_t,
                               const DistillLossParams&, int, void*) {
  no_cuda();
}
DistillLossResult distill_loss_bf16(const std::uint16_t*, const std::uint16_t* const*, int,
                                    const std::int32_t*, std::uint16_t*, std::int64_t,
                                    std::int64_t, const DistillLossParams&, int, void*) {
  no_cuda();
}

// distill_head.hpp
DistillLossResult linear_distill_head(const HeadOperands&, const HeadTeacherOperands*, int,
                                      const DistillHeadParams&, const Context&) {
  no_cuda();
}

}  // namespace codistill::kernels::cuda

// backend.hpp: the registry's CUDA entry, with no device and the reason.
namespace codistill::kernels {

namespace {

const char* kNoCuda =
    "this build of codistill has no CUDA backend (configured without CUDA; rebuild with "
    "-DCODISTILL_CUDA=ON where nvcc is installed)";

[[noreturn]] void unavailable() { throw std::runtime_error(kNoCuda); }

class NoCudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  int device_count() const override { return 0; }
  std::string unavailable_reason() const override { return kNoCuda; }
  bool supports(Op, DType) const override { return false; }
  std::shared_ptr<std::byte> allocate(std::size_t, int) override { unavailable(); }
  Tensor staging_for(const Tensor&) override { unavailable(); }
  void copy_sync(Tensor&, const Tensor&) override { unavailable(); }
  void zero_sync(Tensor&) override { unavailable(); }
  std::unique_ptr<Queue> make_queue(Device, QueueOptions) override { unavailable(); }
  void linear_forward(const Tensor&, const Tensor&, const Tensor*, Tensor&, Activation, Tensor*, Queue&) override {
    unavailable();
  }
  void linear_backward(const Tensor&, const Tensor&, const Tensor&, Tensor*, Tensor&, Tensor*, Activation,
                       const Tensor*, Tensor*, bool, Queue&) override {
    unavailable();
  }
  void activation_forward(const Tensor&, Tensor&, Activation, Queue&) override { unavailable(); }
  void activation_backward(const Tensor&, const Tensor&, Tensor&, Activation, Queue&) override { unavailable(); }
  void conv2d_forward(const Tensor&, const Tensor&, const Tensor*, Tensor&, const Conv2dShape&, Queue&) override {
    unavailable();
  }
  void conv2d_backward(const Tensor&, const Tensor&, const Tensor&, Tensor*, Tensor&, Tensor*, const Conv2dShape&,
                       Queue&) override {
    unavailable();
  }
  void maxpool2d_forward(const Tensor&, Tensor&, Tensor&, const Pool2dShape&, Queue&) override { unavailable(); }
  void maxpool2d_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, const Pool2dShape&,
                          Queue&) override {
    unavailable();
  }
  void batchnorm_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&,
                         bool, const BatchNormShape&, Queue&) override {
    unavailable();
  }
  void batchnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor*,
                          Tensor&, Tensor&, bool, const BatchNormShape&, Queue&) override {
    unavailable();
  }
  void global_avgpool_forward(const Tensor&, Tensor&, std::int64_t, std::int64_t, std::int64_t, Queue&) override {
    unavailable();
  }
  void global_avgpool_backward(const Tensor&, Tensor&, std::int64_t, std::int64_t, std::int64_t, Queue&) override {
    unavailable();
  }
  void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                         const LayerNormShape&, Queue&) override {
    unavailable();
  }
  void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor*,
                          Tensor&, Tensor&, const LayerNormShape&, Queue&) override {
    unavailable();
  }
  void embedding_forward(const Tensor&, const Tensor&, Tensor&, const EmbeddingShape&, Queue&) override {
    unavailable();
  }
  void embedding_backward(const Tensor&, const Tensor&, Tensor&, const EmbeddingShape&, Queue&) override {
    unavailable();
  }
  void attention_forward(const Tensor&, Tensor&, Tensor&, const AttentionShape&, Queue&) override { unavailable(); }
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, const AttentionShape&,
                          Queue&) override {
    unavailable();
  }
  void softmax_forward(const Tensor&, Tensor&, Queue&) override { unavailable(); }
  void softmax_backward(const Tensor&, const Tensor&, Tensor&, Queue&) override { unavailable(); }
  void multiply(const Tensor&, const Tensor&, Tensor&, Queue&) override { unavailable(); }
  void add(const Tensor&, const Tensor&, Tensor&, Queue&) override { unavailable(); }
  DistillLossResult distill_loss(const Tensor&, const std::vector<const Tensor*>&, const Tensor&, Tensor*,
                                 const DistillLossParams&, Queue&) override {
    unavailable();
  }
  DistillLossResult linear_distill_head(const Tensor&, const Tensor&, const Tensor*, const std::vector<HeadTeacher>&,
                                        const Tensor&, Tensor*, Tensor*, Tensor*, const DistillHeadParams&,
                                        Queue&) override {
    unavailable();
  }
  void sgd_update(Tensor&, const Tensor&, Tensor*, const SgdScalars&, const UpdateSource&, Queue&) override {
    unavailable();
  }
  void adamw_update(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWScalars&, const UpdateSource&,
                    Queue&) override {
    unavailable();
  }
};

}  // namespace

Backend& cuda_backend() {
  static NoCudaBackend backend;
  return backend;
}

}  // namespace codistill::kernels
