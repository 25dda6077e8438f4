#pragma once
// The trainer's step of an image config set up in one process, for the in-process step
// benchmarks (bench_teacher_step, bench_step_phases): the student as the trainer builds it
// (its device, precision and queue options), its optimizer, the data and sampler, and
// `teachers` forward-only models of the config's architecture on their own queues with the
// teachers' precision and QueueOptions::frozen_params, as TeacherPool makes them (freshly
// initialized: a forward's cost does not depend on the weights).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "codistill/config/feed_options.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/data/augment.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/data/feed/batch_loader.hpp"
#include "codistill/teachers/precision.hpp"
#include "codistill/train/step.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "kernels/cpu/gemm.hpp"

namespace codistill::bench {

// The median of block times (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class StepFixture {
 public:
  // config: a YAML file; overrides: --set's key=value; threads: run.threads.
  StepFixture(const std::string& config, std::vector<std::string> overrides, int threads, int teachers)
      : c_(load(config, std::move(overrides), threads)),
        data_(data::load_dataset(c_.data)),
        mc_(model_config()),
        student_(make_student()),
        optimizer_(make_optimizer(c_.optimizer, student_)),
        sampler_(data_.train, data::sampler_options(c_)) {
    kernels::QueueOptions to;
    to.allow_tf32 = c_.train.allow_tf32;
    to.compute = teacher_compute(c_);
    to.frozen_params = true;
    const kernels::Device device = kernels::Device::parse(c_.device);
    for (int i = 0; i < teachers; ++i) {
      auto t = std::make_unique<Teacher>();
      Rng rng(c_.run.seed, static_cast<std::uint64_t>(i + 1), 1);
      t->peer = i + 1;
      t->model = build_model(mc_, rng);
      t->model.drop_grads();
      t->model.to_device(device, to);
      teachers_.push_back(std::move(t));
    }
    StepInput input;
    input.augment = data::augment_options(c_, data_.train.normalization);
    input.prefetch = prefetch_batches(c_.data.prefetch, device, c_.run.threads);
    prefetch_ = input.prefetch;
    kernels::DistillLossParams loss;
    loss.temperature = c_.codistill.temperature;
    loss.weight = c_.codistill.weight;
    // The trainer's when it distills, for K = 0 too: only the teachers differ between the Ks.
    loss.hard_weight = c_.codistill.hard_weight;
    step_ = std::make_unique<TrainStep>(student_, data_.train, sampler_, c_.data.batch_size, loss,
                                        c_.train.micro_batches, input);
    step_->set_teacher_compute(teacher_compute(c_));
    step_->set_fused_head(c_.train.fused_head);
  }

  // `count` steps with the first k teachers, then waits for the student's queue.
  void steps(int k, int count, StepTimes* times = nullptr) {
    std::vector<Teacher*> ts;
    for (int i = 0; i < k; ++i) ts.push_back(teachers_[static_cast<std::size_t>(i)].get());
    StepHooks hooks;
    hooks.times = times;
    for (int s = 0; s < count; ++s) step_->run(n_++, ts, *optimizer_, c_.optimizer.lr, hooks);
    student_.synchronize();
  }

  const Config& config() const { return c_; }
  Model& student() { return student_; }
  // The training split's example shape ([C, H, W]), and the trainer's first batch as its
  // loader prepares it (gathered, normalized and augmented), in the config's micro-batches:
  // CPU float32 [batch_size / micro_batches, C, H, W] each, for benches that run the model's
  // layers themselves (bench_layer_times).
  kernels::Shape example_shape() const { return data_.train.example_shape(); }
  std::vector<kernels::Tensor> first_batch() const {
    const std::int64_t parts = c_.train.micro_batches, rows = c_.data.batch_size / parts;
    kernels::Shape shape{rows};
    for (std::int64_t d : example_shape()) shape.push_back(d);
    HostBatch b;
    for (std::int64_t i = 0; i < parts; ++i) {
      b.x.push_back(kernels::Tensor::empty(shape));
      b.labels.push_back(kernels::Tensor::empty({rows}, kernels::DType::i32));
    }
    data::BatchSampler sampler(data_.train, data::sampler_options(c_));
    BatchLoader loader(data_.train, data::augment_options(c_, data_.train.normalization), /*prefetch=*/false);
    loader.load(1, sampler, b, nullptr);
    return b.x;
  }
  bool prefetch() const { return prefetch_; }

 private:
  static Config load(const std::string& config, std::vector<std::string> overrides, int threads) {
    overrides.push_back("run.threads=" + std::to_string(threads));
    Config c = load_config(config, overrides);
    kernels::cpu::set_num_threads(c.run.threads);
    return c;
  }
  ModelConfig model_config() const {
    ModelConfig mc = model_of(c_, 0);
    mc.input_shape = data_.train.example_shape();
    mc.classes = data_.train.classes;
    return mc;
  }
  Model make_student() const {
    Rng rng(c_.run.seed, 0, 1);
    Model m = build_model(mc_, rng);
    kernels::QueueOptions so;
    so.allow_tf32 = c_.train.allow_tf32;
    so.compute = student_compute(c_);
    m.to_device(kernels::Device::parse(c_.device), so);
    return m;
  }

  Config c_;
  data::Splits data_;
  ModelConfig mc_;
  Model student_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<Teacher>> teachers_;
  data::BatchSampler sampler_;
  bool prefetch_ = false;
  std::int64_t n_ = 0;
  std::unique_ptr<TrainStep> step_;  // last: destroyed first (it waits for the student's queue)
};

}  // namespace codistill::bench
