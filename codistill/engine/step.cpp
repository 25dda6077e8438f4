#include "codistill/engine/step.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "codistill/engine/error.hpp"

namespace codistill {

using kernels::Tensor;

TrainStep::TrainStep(Model& student, const data::Dataset& train, std::int64_t batch,
                     kernels::DistillLossParams params, std::int64_t micro_batches)
    : student_(student), train_(train), batch_(batch), params_(params) {
  if (micro_batches < 1 || batch % micro_batches != 0)
    throw std::invalid_argument(fmt::format("TrainStep: {} micro-batches do not divide a batch of {} (train.micro_batches "
                                            "must divide data.batch_size)",
                                            micro_batches, batch));
  kernels::Queue& q = student_.queue();
  const std::int64_t rows = batch / micro_batches;
  kernels::Shape xshape = train.example_shape();
  xshape.insert(xshape.begin(), rows);
  micro_.resize(static_cast<std::size_t>(micro_batches));
  for (Micro& m : micro_) {
    m.x = Tensor::empty(xshape, kernels::DType::f32, q.device());
    m.labels = Tensor::empty({rows}, kernels::DType::i32, q.device());
    m.x_stage = q.backend().staging_for(m.x);
    m.labels_stage = q.backend().staging_for(m.labels);
  }
  dlogits_ = Tensor::empty({rows, train.classes}, kernels::DType::f32, q.device());
  input_ready_ = q.make_event();
  logits_read_ = q.make_event();
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

  // 1. batch: the last batch's copies have left the staging memory before it is refilled.
  input_ready_->synchronize();
  sampler.next_indices(indices_);
  if (static_cast<std::int64_t>(indices_.size()) != batch_)
    throw std::logic_error(fmt::format("TrainStep: the sampler gave {} indices for a batch of {}", indices_.size(), batch_));
  const std::size_t per = indices_.size() / micro_.size();
  std::int64_t batch_rows = 0;
  for (std::size_t i = 0; i < micro_.size(); ++i) {
    Micro& m = micro_[i];
    data::gather(train_, std::span<const std::int64_t>(indices_).subspan(i * per, per), m.x_stage, label_rows_);
    std::memcpy(m.labels_stage.raw(), label_rows_.data(), label_rows_.size() * sizeof(std::int32_t));
    m.rows = std::count_if(label_rows_.begin(), label_rows_.end(), [](std::int32_t y) { return y != -1; });
    batch_rows += m.rows;
    q.copy(m.x, m.x_stage);
    q.copy(m.labels, m.labels_stage);
  }
  q.record(*input_ready_);

  // 2-5 per micro-batch, each weighted by its share of the batch's rows. With one
  // micro-batch the share is exactly 1 and the sums below are exactly its own values.
  StepResult r;
  r.teachers = static_cast<int>(teachers.size());
  for (std::size_t i = 0; i < micro_.size(); ++i) {
    const double share = batch_rows > 0 ? static_cast<double>(micro_[i].rows) / static_cast<double>(batch_rows) : 0.0;
    const kernels::DistillLossResult part = micro_step(step, i, share, teachers);
    r.loss.loss += part.loss;  // already weighted through the scaled loss weights
    r.loss.ce += share * part.ce;
    r.loss.distill += share * part.distill;
    r.loss.rows += part.rows;
  }

  // 6. reduction; 7. snapshot; 8. update.
  if (hooks.reduce_gradients) hooks.reduce_gradients(student_.arena().grads(), q);
  if (hooks.before_update) hooks.before_update();
  optimizer.step(lr);
  return r;
}

kernels::DistillLossResult TrainStep::micro_step(std::int64_t step, std::size_t i, double share,
                                                 const std::vector<Teacher*>& teachers) {
  kernels::Queue& q = student_.queue();
  Micro& m = micro_[i];
  // 2. teachers first, so that their queues are busy while the student's forward runs. After
  // the first micro-batch they also wait until the last loss has read their logits.
  kernels::Event* ready = i == 0 ? input_ready_.get() : logits_read_.get();
  teacher_logits_.clear();
  for (Teacher* t : teachers) teacher_logits_.push_back(&t->forward(m.x, ready));

  // 3. student forward; 4. the loss once every teacher's forward is done.
  const Tensor logits = student_.forward(m.x, /*training=*/true);
  kernels::check_shape(logits, dlogits_.shape(), "student logits");
  for (Teacher* t : teachers) q.wait(*t->forward_done);
  // The loss is linear in its weights (DESIGN.md section 6): scaling both by the share
  // scales the gradient and the loss by it, in the one fused call.
  kernels::DistillLossParams params = params_;
  params.weight *= share;
  params.hard_weight *= share;
  const kernels::DistillLossResult part =
      q.backend().distill_loss(logits, teacher_logits_, m.labels, &dlogits_, params, q);
  if (micro_.size() > 1) q.record(*logits_read_);
  if (!std::isfinite(part.loss))
    throw TrainingError(fmt::format("non-finite loss ({}) at step {}: training diverged; lower optimizer.lr or "
                                    "check the data",
                                    part.loss, step));

  // 5. backward, into gradients zeroed once per step.
  if (i == 0) student_.zero_grad();
  student_.backward(dlogits_);
  return part;
}

}  // namespace codistill
