#include "codistill/engine/training.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>

#include <boost/filesystem/operations.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "codistill/config/config_loader.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/engine/checkpointing.hpp"
#include "codistill/engine/metrics.hpp"
#include "codistill/engine/progress.hpp"
#include "codistill/engine/run_dir.hpp"
#include "codistill/engine/step.hpp"
#include "codistill/engine/teachers.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/impl.hpp"

namespace codistill {

using kernels::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Random streams of one worker, one per purpose, so that adding a use of randomness in
// one place never shifts another.
enum RngPurpose : std::uint64_t { kModelInit = 1 };

// The device a config names, checked against the registry: a device its backend cannot
// use here (a build without it, no hardware, an index beyond the visible ones) throws
// TrainingError (exit code 1) saying which, before anything is written.
kernels::Device usable_device(const std::string& name) {
  const kernels::Device d = kernels::Device::parse(name);
  const kernels::Backend& b = kernels::backend_for(d);
  const int n = b.device_count();
  if (n == 0) throw TrainingError(fmt::format("device '{}': {} - use --device cpu", name, b.unavailable_reason()));
  if (d.index >= n)
    throw TrainingError(fmt::format("device '{}': only {} {} device(s) are visible ({}:0 .. {}:{})", name, n, b.name(),
                                    b.name(), b.name(), n - 1));
  return d;
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
void request_stop() { g_stop.store(true); }
bool stop_requested() { return g_stop.load(); }

struct Trainer::State {
  Config cfg;
  TrainOptions opts;
  RunPaths paths;
  std::shared_ptr<spdlog::logger> log;
  std::unique_ptr<MetricsWriter> metrics;
  data::Splits data;
  kernels::Device device;
  Model model;
  std::unique_ptr<Optimizer> optimizer;
  // Declared after the model: destroyed first, it waits for the model's queue before the
  // model's device memory is released.
  std::unique_ptr<TrainStep> step;
  std::unique_ptr<data::BatchSampler> sampler;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::unique_ptr<TeacherPool> teachers;  // codistillation with peers' checkpoints
  WorkerState worker;  // what a checkpoint holds; worker.step counts completed steps
};

Trainer::Trainer(Config cfg, TrainOptions opts) : s_(std::make_unique<State>()) {
  auto& s = *s_;
  s.cfg = std::move(cfg);
  s.opts = opts;
  const Config& c = s.cfg;
  s.device = usable_device(c.device);  // before anything is written
  kernels::cpu::set_num_threads(c.run.threads);

  // The console first; train.log joins once the run directory is known to be ours.
  std::vector<spdlog::sink_ptr> sinks;
  if (opts.console) sinks.push_back(std::make_shared<spdlog::sinks::stdout_sink_mt>());
  s.log = std::make_shared<spdlog::logger>(fmt::format("worker-{}", c.run.worker), sinks.begin(),
                                           sinks.end());
  s.log->set_pattern(fmt::format("[%H:%M:%S] [w{}] %v", c.run.worker));
  s.log->flush_on(spdlog::level::info);

  auto t0 = Clock::now();
  s.data = data::load_dataset(c.data);
  const double load_s = seconds_since(t0);
  ModelConfig mc = c.model;
  mc.input_shape = s.data.train.example_shape();
  mc.classes = s.data.train.classes;
  Rng init_rng(c.run.seed, static_cast<std::uint64_t>(c.run.worker), kModelInit);
  s.model = build_model(mc, init_rng);

  s.checkpoints = std::make_unique<CheckpointManager>(c, s.log, opts.fail_checkpoint_steps);
  auto resume_from = s.checkpoints->find_resume_point(opts.resume, s.model.fingerprint());
  const bool had_metrics = boost::filesystem::exists(run_paths(c).metrics);
  s.paths = prepare_run_dir(c, opts.resume);
  s.log->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(s.paths.log));
  s.metrics = std::make_unique<MetricsWriter>(s.paths.metrics);
  s.checkpoints->set_metrics(s.metrics.get());

  s.log->info("data: {} train / {} test examples of shape {}, {} classes, normalization {} "
              "(shift {:.4f}, scale {:.4f}), loaded in {:.1f} s",
              s.data.train.size(), s.data.test.size(), kernels::shape_str(s.data.train.example_shape()),
              s.data.train.classes, s.data.train.normalization.kind, s.data.train.normalization.shift,
              s.data.train.normalization.scale, load_s);
  s.log->info("model {} ({} parameters, fingerprint {}):\n{}", mc.kind, s.model.num_params(),
              s.model.fingerprint(), s.model.summary());
  s.optimizer = make_optimizer(c.optimizer, s.model);
  s.sampler = std::make_unique<data::BatchSampler>(s.data.train, data::sampler_options(c));
  s.log->info("data shard: {} of {} training examples ({} mode)", s.sampler->shard_size(),
              s.data.train.size(), c.data.shard);

  WorkerState& w = s.worker;
  w.model = &s.model;
  w.optimizer = s.optimizer.get();
  w.sampler = s.sampler.get();
  w.normalization = s.data.train.normalization;
  w.worker = c.run.worker;
  w.model_yaml = model_yaml(mc);
  w.config_yaml = to_yaml(c);
  if (resume_from) {
    restore_state(w, resume_from->data);
    s.log->info("resuming from {} at step {}", resume_from->file.path, w.step);
  }
  else if (had_metrics)
    s.log->warn("{} holds an earlier start of this worker but no checkpoint: starting from step 0, "
                "appending to its metrics.jsonl", s.paths.worker_dir);
  // Built, initialized and restored on the host (bit for bit a CPU run's start), then
  // moved (a no-op on the CPU); optimizer slots follow the parameters on their next use.
  kernels::QueueOptions queue_options;
  queue_options.allow_tf32 = c.train.allow_tf32;
  s.model.to_device(s.device, queue_options);
  s.log->info("device {} ({} backend{})", s.device.str(), s.model.queue().backend().name(),
              c.train.allow_tf32 ? ", TF32 allowed" : "");
  kernels::DistillLossParams loss_params;
  loss_params.temperature = c.codistill.temperature;
  loss_params.weight = c.codistill.weight;
  loss_params.hard_weight = c.codistill.enabled ? c.codistill.hard_weight : 1.0;
  s.step = std::make_unique<TrainStep>(s.model, s.data.train, c.data.batch_size, loss_params);
  s.checkpoints->prepare(w);
  if (c.codistill.enabled) {
    s.teachers = std::make_unique<TeacherPool>(s.cfg, mc, s.model.fingerprint(), s.log);
    s.teachers->resume(w.teacher_steps, s.metrics.get(), w.step);
    s.log->info("codistillation ({} mode) with peers [{}], burn-in {} steps, reload every {}, weight {}, "
                "temperature {}",
                c.codistill.mode, fmt::join(s.teachers->peers(), ", "), c.codistill.burn_in,
                c.codistill.reload_every, c.codistill.weight, c.codistill.temperature);
  }
}

Trainer::~Trainer() = default;
Model& Trainer::model() { return s_->model; }
const Config& Trainer::config() const { return s_->cfg; }

TrainSummary Trainer::run() {
  auto& s = *s_;
  const Config& c = s.cfg;
  const std::int64_t B = c.data.batch_size;
  std::vector<Teacher*> step_teachers;
  int window_teachers = 0;
  StepHooks hooks;
  hooks.before_update = [&] { s.checkpoints->before_update(); };  // a snapshot copied behind the passes

  Progress progress(c.train.steps, s.worker.step, s.opts.interactive);
  // Log lines clear the in-place progress line first, so the two never interleave.
  auto info = [&]<class... A>(fmt::format_string<A...> format, A&&... args) {
    progress.clear();
    s.log->info(format, std::forward<A>(args)...);
  };
  info("training {} steps of batch {} on {} ({} threads), shard {} as worker {}/{}",
       c.train.steps, B, c.device, c.run.threads, c.data.shard, c.run.worker, c.run.workers);

  double eval_s = 0;  // kept out of the training throughput
  auto run_eval = [&](std::int64_t step) {
    auto t = Clock::now();
    std::vector<std::int32_t> mine, theirs;
    EvalResult r = evaluate(s.model, s.data.test, c.train.eval_batch_size, &mine);
    // Churn against every teacher in use: the fraction of test examples whose predicted
    // class differs (DESIGN.md section 7).
    nlohmann::json churn = nlohmann::json::object();
    if (s.teachers)
      for (const auto& teacher : s.teachers->teachers()) {
        evaluate(teacher->model, s.data.test, c.train.eval_batch_size, &theirs);
        std::int64_t differ = 0;
        for (std::size_t i = 0; i < mine.size(); ++i) differ += mine[i] != theirs[i];
        churn[std::to_string(teacher->peer)] = static_cast<double>(differ) / static_cast<double>(mine.size());
      }
    s.metrics->emit("eval", step, {{"split", "test"}, {"loss", r.loss}, {"accuracy", r.accuracy},
                                   {"churn", churn}});
    info("eval  step {:>7}  test loss {:.4f}  accuracy {:.2f}%  ({:.1f} s)", step, r.loss,
         100 * r.accuracy, seconds_since(t));
    eval_s += seconds_since(t);
    return r;
  };

  auto staleness_json = [&]() -> nlohmann::json {
    if (!s.teachers || window_teachers == 0) return nullptr;
    auto st = s.teachers->staleness(s.worker.step);
    return st ? nlohmann::json(*st) : nlohmann::json(nullptr);
  };

  const auto started = Clock::now();
  auto window_start = started;
  double window_loss = 0, window_ce = 0, window_distill = 0;
  std::int64_t window_steps = 0;
  double rate = 0;
  bool interrupted = false;
  EvalResult last_eval;
  bool evaluated_last = false;

  while (s.worker.step < c.train.steps) {
    if (stop_requested()) {
      interrupted = true;
      break;
    }
    if (s.teachers) {
      s.teachers->at_step(s.worker.step, s.metrics.get());
      s.worker.teacher_steps.clear();
      for (const auto& t : s.teachers->teachers()) s.worker.teacher_steps.push_back({t->peer, t->step});
    }
    const double lr = learning_rate(c.optimizer, s.worker.step, c.train.steps);
    // Teachers (forward only, on the same batch) join after burn-in.
    step_teachers.clear();
    if (s.teachers && s.worker.step >= c.codistill.burn_in)
      for (const auto& t : s.teachers->teachers()) step_teachers.push_back(t.get());
    const StepResult r = s.step->run(s.worker.step + 1, *s.sampler, step_teachers, *s.optimizer, lr, hooks);
    const kernels::DistillLossResult& res = r.loss;
    window_teachers = r.teachers;
    ++s.worker.step;
    s.worker.examples_seen += B;
    evaluated_last = false;

    window_loss += res.loss;
    window_ce += res.ce;
    window_distill += res.distill;
    ++window_steps;
    const bool log_now = (c.train.log_every > 0 && s.worker.step % c.train.log_every == 0) ||
                         s.worker.step == c.train.steps;
    if (log_now) {
      double secs = seconds_since(window_start);
      rate = secs > 0 ? static_cast<double>(window_steps * B) / secs : 0;
      double n = static_cast<double>(window_steps);
      s.metrics->emit("train", s.worker.step,
                      {{"loss", window_loss / n}, {"ce", window_ce / n},
                       {"distill", window_distill / n}, {"lr", lr}, {"examples_per_s", rate},
                       {"teachers", window_teachers}, {"staleness", staleness_json()}});
      if (!s.opts.interactive)
        info("train step {:>7}/{}  loss {:.4f}  distill {:.4f}  teachers {}  lr {:.4g}  {:.0f} ex/s",
             s.worker.step, c.train.steps, window_loss / n, window_distill / n, window_teachers, lr, rate);
      window_loss = window_ce = window_distill = 0;
      window_steps = 0;
      window_start = Clock::now();
    }
    progress.update(s.worker.step, res.loss, rate);
    if (c.checkpoint.every > 0 && s.worker.step % c.checkpoint.every == 0) {
      progress.clear();
      s.checkpoints->save(s.worker);
    }
    s.checkpoints->poll();
    if (c.train.eval_every > 0 && s.worker.step % c.train.eval_every == 0 && s.worker.step < c.train.steps) {
      last_eval = run_eval(s.worker.step);
      evaluated_last = true;
      window_start = Clock::now();  // keep eval time out of the training rate
    }
  }
  progress.finish();

  TrainSummary sum;
  sum.steps = s.worker.step;
  sum.interrupted = interrupted;
  if (interrupted) info("stop requested: finished step {}, publishing a checkpoint and stopping", s.worker.step);
  s.checkpoints->save(s.worker, /*overlap=*/false);  // the final state (no-op if published already)
  s.checkpoints->finish();
  if (!evaluated_last) last_eval = run_eval(s.worker.step);
  sum.wall_s = s.metrics->elapsed_s();  // the whole run, data loading included
  sum.test_loss = last_eval.loss;
  sum.test_accuracy = last_eval.accuracy;
  const double train_s = seconds_since(started) - eval_s;
  sum.examples_per_s = train_s > 0 ? static_cast<double>(s.worker.step * B) / train_s : 0;
  s.metrics->emit("done", s.worker.step, {{"wall_s", sum.wall_s}, {"accuracy", sum.test_accuracy},
                                   {"loss", sum.test_loss}, {"train_examples_per_s", sum.examples_per_s},
                                   {"interrupted", interrupted}});
  info("done: {} steps in {} ({:.0f} training ex/s), test accuracy {:.2f}%, test loss {:.4f}",
       s.worker.step, format_duration(sum.wall_s), sum.examples_per_s, 100 * sum.test_accuracy,
       sum.test_loss);
  return sum;
}

}  // namespace codistill
