#include "codistill/train/step.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "codistill/util/run_errors.hpp"

namespace codistill {

using kernels::Tensor;

namespace {
void mark(StepTimes* times, StepTimes::Phase p) {
  if (times) times->mark(p);
}
}  // namespace

TrainStep::TrainStep(Model& student, std::unique_ptr<BatchSource> source, std::int64_t batch,
                     kernels::DistillLossParams params, std::int64_t micro_batches, bool double_buffer)
    : student_(student), params_(params), source_(std::move(source)) {
  if (micro_batches < 1 || batch % micro_batches != 0)
    throw std::invalid_argument(fmt::format("TrainStep: {} micro-batches do not divide a batch of {} (train.micro_batches "
                                            "must divide data.batch_size)",
                                            micro_batches, batch));
  kernels::Queue& q = student_.queue();
  const BatchLayout layout = source_->layout(batch / micro_batches);
  slots_.resize(double_buffer ? 2 : 1);
  for (Slot& slot : slots_) {
    slot.micro.resize(static_cast<std::size_t>(micro_batches));
    for (Micro& m : slot.micro) {
      m.x = Tensor::empty(layout.input, layout.input_dtype, q.device());
      m.labels = Tensor::empty({layout.labels}, kernels::DType::i32, q.device());
      m.x_stage = q.backend().staging_for(m.x);
      m.labels_stage = q.backend().staging_for(m.labels);
      slot.host.x.push_back(m.x_stage);  // handles sharing the staging memory
      slot.host.labels.push_back(m.labels_stage);
    }
    slot.input_ready = q.make_event();
  }
  dlogits_ = Tensor::empty({layout.labels, layout.classes}, kernels::DType::f32, q.device());
  logits_read_ = q.make_event();
}

TrainStep::TrainStep(Model& student, const data::Dataset& train, data::BatchSampler& sampler, std::int64_t batch,
                     kernels::DistillLossParams params, std::int64_t micro_batches, const StepInput& input)
    : TrainStep(student, std::make_unique<ImageBatchSource>(train, sampler, input.augment, input.prefetch, input.slice),
                batch, params, micro_batches, input.prefetch) {}

TrainStep::~TrainStep() {
  try {
    student_.synchronize();
  } catch (...) {  // a destructor must not throw; a failed device fails the run elsewhere
  }
}

StepResult TrainStep::run(std::int64_t step, const std::vector<Teacher*>& teachers, Optimizer& optimizer, double lr,
                          const StepHooks& hooks) {
  kernels::Queue& q = student_.queue();
  StepTimes* const times = hooks.times;
  if (times) times->start();

  // 1. batch: the copies out of both slots' staging memory are done before either is
  // refilled (this step's slot here, the next step's by the loader's helper thread).
  Slot& slot = slots_[current_];
  Slot* next = slots_.size() > 1 ? &slots_[1 - current_] : nullptr;
  for (Slot& s : slots_) s.input_ready->synchronize();
  source_->load(step, slot.host, next ? &next->host : nullptr);
  if (next) current_ = 1 - current_;
  // The mean is over the group's batch: in one process, the sum of the micro-batches' rows
  // (label rows: one per image, one per token of a window).
  const std::int64_t batch_rows = slot.host.group_rows;
  for (std::size_t i = 0; i < slot.micro.size(); ++i) {
    Micro& m = slot.micro[i];
    q.copy(m.x, m.x_stage);
    q.copy(m.labels, m.labels_stage);
  }
  q.record(*slot.input_ready);
  mark(times, StepTimes::batch);

  // 2-5 per micro-batch, each weighted by its share of the (group's) batch rows. With one
  // micro-batch in one process the share is exactly 1 and the sums below are exactly its
  // own values.
  StepResult r;
  r.teachers = static_cast<int>(teachers.size());
  for (std::size_t i = 0; i < slot.micro.size(); ++i) {
    const double share =
        batch_rows > 0 ? static_cast<double>(slot.host.rows[i]) / static_cast<double>(batch_rows) : 0.0;
    // The last micro-batch's backward makes the gradients final, layer by layer.
    const bool last = i + 1 == slot.micro.size();
    if (last && hooks.gradients_ready) student_.set_gradients_ready(hooks.gradients_ready);
    kernels::DistillLossResult part;
    try {
      part = micro_step(step, slot, i, share, teachers, times);
    } catch (...) {
      if (last && hooks.gradients_ready) student_.set_gradients_ready(nullptr);
      throw;
    }
    if (last && hooks.gradients_ready) student_.set_gradients_ready(nullptr);
    r.loss.loss += part.loss;  // already weighted through the scaled loss weights
    r.loss.ce += share * part.ce;
    r.loss.distill += share * part.distill;
    r.loss.rows += part.rows;
  }

  // 6. reduction; 7. snapshot; 8. update.
  if (hooks.reduce_gradients) hooks.reduce_gradients(student_.arena().grads(), q);
  mark(times, StepTimes::reduce);
  std::optional<OptimizerBlocks> into;
  if (hooks.before_update) into = hooks.before_update();
  if (into && !hooks.after_update)
    throw std::logic_error("TrainStep: an out-of-place update needs StepHooks::after_update to take the old state");
  mark(times, StepTimes::snapshot_wait);
  const auto update_start = std::chrono::steady_clock::now();
  std::optional<OptimizerBlocks> before;
  if (into)
    before = optimizer.step_into(lr, std::move(*into));
  else
    optimizer.step(lr);
  const double update_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - update_start).count();
  mark(times, StepTimes::update);
  if (hooks.after_update) hooks.after_update(std::move(before), update_s);
  if (times) ++times->steps;
  return r;
}

void TrainStep::set_fused_head(bool on) {
  if (on && !student_.linear_head())
    throw std::invalid_argument("the model does not end in a linear layer to its logits (a Linear "
                                "without a fused activation, or a tied head): nothing to fuse into the loss");
  fused_head_ = on;
  // The [labels, classes] logits' gradient is never written with the fused head (the loss
  // applies the head by chunks): not held then (1.6 GB for GPT-2's 8192 x 50304 on a device).
  if (on) {
    dlogits_shape_ = dlogits_.defined() ? dlogits_.shape() : dlogits_shape_;
    dlogits_ = Tensor();
  } else if (!dlogits_.defined()) {
    dlogits_ = Tensor::empty(dlogits_shape_, kernels::DType::f32, student_.queue().device());
  }
}

// After a micro-batch's loss: the next micro-batch's teachers may overwrite their logits
// once this loss has read them; a loss that is not finite stops the run.
void TrainStep::after_loss(const kernels::DistillLossResult& part, Slot& slot, std::int64_t step) {
  if (slot.micro.size() > 1) student_.queue().record(*logits_read_);
  if (!std::isfinite(part.loss))
    throw TrainingError(fmt::format("non-finite loss ({}) at step {}: training diverged; lower optimizer.lr or "
                                    "check the data",
                                    part.loss, step));
}

// Phase 2: each teacher's forward on the micro-batch, queued once `ready` is reached: its
// logits, or with the fused head its features and head (the loss applies the head itself,
// chunk by chunk, never holding a teacher's logits).
void TrainStep::queue_teachers(const Tensor& x, kernels::Event* ready, const std::vector<Teacher*>& teachers) {
  teacher_logits_.clear();
  head_teachers_.clear();
  for (Teacher* t : teachers) {
    if (!fused_head_) {
      teacher_logits_.push_back(&t->forward(x, ready));
      continue;
    }
    const auto head = t->model.linear_head();
    if (!head)
      throw TrainingError(fmt::format("train.fused_head: teacher {} (step {}) does not end in a linear layer to its "
                                      "logits; it cannot teach through the fused head",
                                      t->label(), t->step));
    head_teachers_.push_back({&t->forward_features(x, ready), head->weight, head->bias});
  }
}

// Phase 4 on the student's output `out` (its logits, or its features with the fused head,
// which also accumulates the head's gradients); leaves the gradient of `out` in dlogits_
// or dfeatures_. The loss is linear in its weights (DESIGN.md section 6): scaling both by
// the share scales the gradient and the loss by it, in the one fused call.
kernels::DistillLossResult TrainStep::loss(const Tensor& out, const Micro& m, double share) {
  kernels::Queue& q = student_.queue();
  kernels::DistillLossParams params = params_;
  params.weight *= share;
  params.hard_weight *= share;
  if (!fused_head_) {
    kernels::check_shape(out, dlogits_.shape(), "student logits");
    return q.backend().distill_loss(out, teacher_logits_, m.labels, &dlogits_, params, q);
  }
  if (!dfeatures_.defined() || dfeatures_.shape() != out.shape() || dfeatures_.dtype() != out.dtype())
    dfeatures_ = Tensor::empty(out.shape(), out.dtype(), q.device());
  const Model::LinearHead head = *student_.linear_head();
  kernels::DistillHeadParams head_params;
  head_params.loss = params;
  head_params.teacher_compute = teacher_compute_;
  return q.backend().linear_distill_head(out, *head.weight, head.bias, head_teachers_, m.labels, &dfeatures_,
                                         head.weight_grad, head.bias_grad, head_params, q);
}

kernels::DistillLossResult TrainStep::micro_step(std::int64_t step, Slot& slot, std::size_t i, double share,
                                                 const std::vector<Teacher*>& teachers, StepTimes* times) {
  kernels::Queue& q = student_.queue();
  Micro& m = slot.micro[i];
  // 2. teachers first, so that their queues are busy while the student's forward runs. After
  // the first micro-batch they also wait until the last loss has read their logits.
  queue_teachers(m.x, i == 0 ? slot.input_ready.get() : logits_read_.get(), teachers);
  mark(times, StepTimes::teachers);
  // 3. student forward (up to its head with the fused head).
  const Tensor out = fused_head_ ? student_.forward_features(m.x, /*training=*/true)
                                 : student_.forward(m.x, /*training=*/true);
  mark(times, StepTimes::forward);
  // Gradients are zeroed once per step. The fused loss adds the head's gradients, so they
  // are zeroed before it, eagerly; otherwise after the loss (which touches none), lazily (a
  // model of Linears writes them in its first backward instead).
  if (fused_head_ && i == 0) student_.zero_grad();
  if (fused_head_) mark(times, StepTimes::zero_grad);
  // 4. the loss once every teacher's forward is done.
  for (Teacher* t : teachers) q.wait(*t->forward_done);
  const kernels::DistillLossResult part = loss(out, m, share);
  after_loss(part, slot, step);
  mark(times, StepTimes::loss);
  // 5. backward.
  if (!fused_head_) {
    if (i == 0) student_.zero_grad_lazily();
    mark(times, StepTimes::zero_grad);
  }
  if (fused_head_)
    student_.backward_features(dfeatures_);
  else
    student_.backward(dlogits_);
  mark(times, StepTimes::backward);
  return part;
}

}  // namespace codistill
