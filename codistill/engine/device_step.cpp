#include "codistill/engine/device_step.hpp"

#include <cstring>

#include <fmt/format.h>

#include "codistill/engine/training.hpp"
#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/memory.hpp"

namespace codistill {

namespace cuda = kernels::cuda;

kernels::Device usable_device(const std::string& name) {
  const kernels::Device d = kernels::Device::parse(name);
  if (d.is_cpu()) return d;
  if (!cuda::built_with_cuda())
    throw TrainingError(fmt::format("device '{}': this build of codistill has no CUDA backend (it was configured "
                                    "without CUDA; rebuild with -DCODISTILL_CUDA=ON where nvcc is installed) - "
                                    "use --device cpu",
                                    name));
  const int n = cuda::device_count();
  if (n == 0)
    throw TrainingError(fmt::format("device '{}': no CUDA device is visible to this process (no GPU, no driver, "
                                    "or CUDA_VISIBLE_DEVICES hides them) - use --device cpu",
                                    name));
  if (d.index >= n)
    throw TrainingError(fmt::format("device '{}': only {} CUDA device(s) are visible (cuda:0 .. cuda:{})", name, n,
                                    n - 1));
  return d;
}

DeviceStep::DeviceStep(kernels::Device device, bool allow_tf32, kernels::Shape batch_shape, std::int64_t classes)
    : device_(device),
      allow_tf32_(allow_tf32),
      batch_(batch_shape.at(0)),
      classes_(classes),
      main_(device.index),
      input_ready_(device.index) {
  x_ = kernels::Tensor::empty(batch_shape, kernels::DType::f32, device);
  dlogits_ = kernels::Tensor::empty({batch_, classes_}, kernels::DType::f32, device);
  labels_ = DeviceBuffer(static_cast<std::size_t>(batch_) * sizeof(std::int32_t), device.index);
  x_host_.reserve(x_.nbytes());
  labels_host_.reserve(static_cast<std::size_t>(batch_) * sizeof(std::int32_t));
}

DeviceStep::~DeviceStep() {
  try {
    main_.synchronize();
  } catch (...) {  // a destructor must not throw; a failed device fails the run elsewhere
  }
}

cuda::Context DeviceStep::context() const { return main_.context(allow_tf32_); }

kernels::cpu::DistillLossResult DeviceStep::forward_loss(Model& student, const std::vector<Teacher*>& teachers,
                                                         data::BatchSampler& sampler, const data::Dataset& train,
                                                         const kernels::cpu::DistillLossParams& params) {
  const cuda::Context ctx = context();
  // The last batch's copies have left the pinned buffers (the loss synchronized the stream
  // already; this says so where it matters).
  input_ready_.synchronize();
  sampler.next_indices(indices_);
  const std::int64_t row = train.example_numel();
  if (static_cast<std::int64_t>(indices_.size()) != batch_ || row * batch_ != x_.numel())
    throw std::logic_error("DeviceStep: the sampler's batch does not match the device buffers");
  auto* xs = x_host_.as<float>();
  auto* ys = labels_host_.as<std::int32_t>();
  for (std::int64_t r = 0; r < batch_; ++r) {
    const std::int64_t i = indices_[static_cast<std::size_t>(r)];
    std::memcpy(xs + r * row, train.example(i), static_cast<std::size_t>(row) * sizeof(float));
    ys[r] = train.labels[static_cast<std::size_t>(i)];
  }
  cuda::memcpy_async(x_.raw(), xs, x_.nbytes(), cuda::CopyKind::host_to_device, ctx);
  cuda::memcpy_async(labels_.data(), ys, labels_.size(), cuda::CopyKind::host_to_device, ctx);
  input_ready_.record(main_.handle());

  // Teachers first, so that their streams are busy while the student's forward runs.
  teacher_logits_.clear();
  for (Teacher* t : teachers) {
    if (!t->device) throw std::logic_error("DeviceStep: teacher of peer " + std::to_string(t->peer) + " is not on the device");
    teacher_logits_.push_back(t->forward(x_, &input_ready_).data<float>());
  }
  const kernels::Tensor logits = student.forward(x_, /*training=*/true);
  kernels::check_shape(logits, {batch_, classes_}, "student logits");
  for (Teacher* t : teachers) t->device->forward_done.wait(main_.handle());
  return cuda::distill_loss(logits.data<float>(), teacher_logits_.data(), static_cast<int>(teacher_logits_.size()),
                            labels_.as<std::int32_t>(), dlogits_.data<float>(), batch_, classes_, params,
                            device_.index, main_.handle());
}

}  // namespace codistill
