#include "codistill/engine/step.hpp"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "codistill/engine/error.hpp"

namespace codistill {

using kernels::Tensor;

TrainStep::TrainStep(Model& student, const data::Dataset& train, std::int64_t batch,
                     kernels::DistillLossParams params)
    : student_(student), train_(train), batch_(batch), params_(params) {
  kernels::Queue& q = student_.queue();
  kernels::Shape xshape = train.example_shape();
  xshape.insert(xshape.begin(), batch);
  x_ = Tensor::empty(xshape, kernels::DType::f32, q.device());
  labels_ = Tensor::empty({batch}, kernels::DType::i32, q.device());
  dlogits_ = Tensor::empty({batch, train.classes}, kernels::DType::f32, q.device());
  x_stage_ = q.backend().staging_for(x_);
  labels_stage_ = q.backend().staging_for(labels_);
  input_ready_ = q.make_event();
}

TrainStep::~TrainStep() {
  try {
    student_.synchronize();
  } catch (...) {  // a destructor must not throw; a failed device fails the run elsewhere
  }
}

StepResult TrainStep::run(std::int64_t step, data::BatchSampler& sampler, const std::vector<Teacher*>& teachers,
                          Optimizer& optimizer, double lr, const StepHooks& hooks) {
  kernels::Queue& q = student_.queue();
  kernels::Backend& backend = q.backend();

  // 1. batch: the last batch's copies have left the staging memory before it is refilled.
  input_ready_->synchronize();
  sampler.next_indices(indices_);
  data::gather(train_, indices_, x_stage_, label_rows_);
  std::memcpy(labels_stage_.raw(), label_rows_.data(), label_rows_.size() * sizeof(std::int32_t));
  q.copy(x_, x_stage_);
  q.copy(labels_, labels_stage_);
  q.record(*input_ready_);

  // 2. teachers first, so that their queues are busy while the student's forward runs.
  teacher_logits_.clear();
  for (Teacher* t : teachers) teacher_logits_.push_back(&t->forward(x_, input_ready_.get()));

  // 3. student forward; 4. the loss once every teacher's forward is done.
  const Tensor logits = student_.forward(x_, /*training=*/true);
  kernels::check_shape(logits, dlogits_.shape(), "student logits");
  for (Teacher* t : teachers) q.wait(*t->forward_done);
  StepResult r;
  r.teachers = static_cast<int>(teachers.size());
  r.loss = backend.distill_loss(logits, teacher_logits_, labels_, &dlogits_, params_, q);
  if (!std::isfinite(r.loss.loss))
    throw TrainingError(fmt::format("non-finite loss ({}) at step {}: training diverged; lower optimizer.lr or "
                                    "check the data",
                                    r.loss.loss, step));

  // 5. backward into zeroed gradients; 6. reduction; 7. snapshot; 8. update.
  student_.zero_grad();
  student_.backward(dlogits_);
  if (hooks.reduce_gradients) hooks.reduce_gradients(student_.arena().grads(), q);
  if (hooks.before_update) hooks.before_update();
  optimizer.step(lr);
  return r;
}

}  // namespace codistill
