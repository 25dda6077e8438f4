#pragma once
// The CUDA half of the training step (DESIGN.md section 1); the CPU loop of training.cpp is
// the other half and does not go through here.
//
// One main stream carries the student: the batch copy, its forward, the fused loss, its
// backward and the optimizer step, in that order, so no event is needed among them. The
// teachers' forwards run on their own streams (Teacher::forward): each waits on an event
// recorded after the batch copy, and the loss waits on each teacher's forward_done, so the
// teachers' forwards overlap the student's. The loss returns to the host (logging needs
// the value every step), which synchronizes the main stream once per step; the backward
// pass and the optimizer update then run while the host prepares the next batch.
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/engine/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/device_memory.hpp"
#include "kernels/cpu/distill_loss.hpp"
#include "kernels/cuda/context.hpp"

namespace codistill {

// The device a config names, checked against this build and this machine: a CUDA device
// that cannot be used (a build without CUDA, no visible GPU, an index beyond the visible
// ones) throws TrainingError (exit code 1) saying which.
kernels::Device usable_device(const std::string& name);

class DeviceStep {
 public:
  // device: CUDA (usable_device); batch_shape [B, C, H, W]; classes: V.
  DeviceStep(kernels::Device device, bool allow_tf32, kernels::Shape batch_shape, std::int64_t classes);
  ~DeviceStep();  // waits for the main stream
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  // The main stream, for Model::to_device and Optimizer::set_cuda_context.
  kernels::cuda::Context context() const;

  // One step up to the loss: the sampler's next batch gathered straight into pinned memory
  // (the sampler advances exactly as next_batch does: a CUDA run sees a CPU run's batches),
  // copied to the device, the teachers' forwards (teachers may be empty: no distillation
  // this step), the student's training forward, and the fused loss of DESIGN.md section 6.
  // The logits' gradient stays on the device: dlogits(), for Model::backward.
  kernels::cpu::DistillLossResult forward_loss(Model& student, const std::vector<Teacher*>& teachers,
                                               data::BatchSampler& sampler, const data::Dataset& train,
                                               const kernels::cpu::DistillLossParams& params);
  const kernels::Tensor& dlogits() const { return dlogits_; }

 private:
  kernels::Device device_;
  bool allow_tf32_;
  std::int64_t batch_, classes_;
  // Declared first: destroyed after every buffer used on them.
  kernels::cuda::Stream main_;
  kernels::cuda::Event input_ready_;  // after the batch copy: teachers wait on it
  PinnedBuffer x_host_, labels_host_;
  kernels::Tensor x_, dlogits_;
  DeviceBuffer labels_;  // int32, which kernels::Tensor does not hold
  std::vector<std::int64_t> indices_;
  std::vector<const float*> teacher_logits_;
};

}  // namespace codistill
