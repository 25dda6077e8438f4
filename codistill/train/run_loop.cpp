// Trainer::run: a scheduler of every-N events around TrainStep (train/step.hpp, where the
// phases of a step live). Before a step: the teacher reload (codistill.reload_every, in
// TeacherPool::at_step). After it, in this order: the `train` log line (train.log_every
// and the last step), the checkpoint (checkpoint.every), reporting finished writes, and the
// evaluation (train.eval_every, except at the last step, which the end of the run
// evaluates). At the end, or on a stop request: a final checkpoint, evaluation and `done`.
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "codistill/train/group.hpp"
#include "codistill/train/progress.hpp"
#include "codistill/train/trainer_state.hpp"

namespace codistill {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// An event that fires after every `every`-th completed step (never when every <= 0), and
// after the last step too when at_last.
struct Periodic {
  std::int64_t every;
  bool at_last;
  std::function<void(std::int64_t step)> fire;
  bool due(std::int64_t step, std::int64_t last) const {
    return (every > 0 && step % every == 0 && (at_last || step < last)) || (at_last && step == last);
  }
};

// Loss terms averaged over the steps since the last `train` event, and the rate.
struct Window {
  Clock::time_point start = Clock::now();
  double loss = 0, ce = 0, distill = 0;
  std::int64_t steps = 0;
  int teachers = 0;
  void add(const StepResult& r) {
    loss += r.loss.loss;
    ce += r.loss.ce;
    distill += r.loss.distill;
    teachers = r.teachers;
    ++steps;
  }
  void reset() { *this = Window{}; }
};

}  // namespace

TrainSummary Trainer::run() {
  auto& s = *s_;
  const Config& c = s.cfg;
  // B: the examples of one step, over all the group's ranks.
  const std::int64_t B = c.data.batch_size * s.group->size(), last = c.train.steps;
  Progress progress(last, s.worker.step, s.opts.interactive && s.lead);
  // Log lines clear the in-place progress line first, so the two never interleave.
  auto info = [&]<class... A>(fmt::format_string<A...> format, A&&... args) {
    progress.clear();
    s.log->info(format, std::forward<A>(args)...);
  };
  const std::int64_t K = c.train.micro_batches;
  info("training {} steps of batch {}{} on {} ({} threads), shard {} as worker {}/{}", last, B,
       K > 1 ? fmt::format(" (gradients summed over {} micro-batches of {})", K, c.data.batch_size / K) : "", c.device,
       c.run.threads, c.data.shard, c.run.worker, c.run.workers);

  const bool text = c.data.kind == "text";
  Window window;
  double rate = 0, eval_s = 0, lr = 0;  // eval time is kept out of the training throughput
  EvalResult last_eval;
  bool evaluated_last = false;

  auto run_eval = [&](std::int64_t step) {
    auto t = Clock::now();
    std::vector<std::int32_t> mine, theirs;
    EvalResult r = s.evaluate(s.model, &mine);
    // Churn against every teacher in use: the fraction of test examples whose predicted
    // class differs (DESIGN.md section 7).
    nlohmann::json churn = nlohmann::json::object();
    auto add_churn = [&](Teacher& teacher) {
      s.evaluate(teacher.model, &theirs);
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < mine.size(); ++i) differ += mine[i] != theirs[i];
      churn[teacher.label()] = static_cast<double>(differ) / static_cast<double>(mine.size());
    };
    if (s.teachers) {
      for (const auto& teacher : s.teachers->teachers()) add_churn(*teacher);
      for (const auto& teacher : s.teachers->fixed()) add_churn(*teacher);
    }
    nlohmann::json fields = {{"split", "test"}, {"loss", r.loss}, {"accuracy", r.accuracy}, {"churn", churn}};
    if (text) {  // per token: the loss is nats per token, accuracy and churn per predicted token
      fields["perplexity"] = std::exp(r.loss);
      fields["tokens"] = r.examples;
    }
    s.metrics->emit("eval", step, fields);
    if (text)
      info("eval  step {:>7}  held-out loss {:.4f} nats/token  perplexity {:.2f}  next-token accuracy {:.2f}%  "
           "({:.1f} s)", step, r.loss, std::exp(r.loss), 100 * r.accuracy, seconds_since(t));
    else
      info("eval  step {:>7}  test loss {:.4f}  accuracy {:.2f}%  ({:.1f} s)", step, r.loss, 100 * r.accuracy,
           seconds_since(t));
    eval_s += seconds_since(t);
    return r;
  };

  const std::vector<Periodic> after_step = {
      {c.train.log_every, /*at_last=*/true,
       [&](std::int64_t step) {
         const double secs = seconds_since(window.start);
         rate = secs > 0 ? static_cast<double>(window.steps * B) / secs : 0;
         const double n = static_cast<double>(window.steps);
         nlohmann::json staleness = nullptr;
         if (s.teachers && window.teachers > 0)
           if (auto st = s.teachers->staleness(step)) staleness = *st;
         nlohmann::json fields = {{"loss", window.loss / n}, {"ce", window.ce / n}, {"distill", window.distill / n},
                                  {"lr", lr}, {"examples_per_s", rate}, {"teachers", window.teachers},
                                  {"staleness", staleness}};
         if (text) fields["tokens_per_s"] = rate * static_cast<double>(c.data.context);  // examples are windows
         s.metrics->emit("train", step, fields);
         if (!s.opts.interactive)
           info("train step {:>7}/{}  loss {:.4f}  distill {:.4f}  teachers {}  lr {:.4g}  {:.0f} ex/s", step, last,
                window.loss / n, window.distill / n, window.teachers, lr, rate);
         window.reset();
       }},
      {c.checkpoint.every, /*at_last=*/false,
       [&](std::int64_t) {
         progress.clear();
         s.checkpoints->save(s.worker);
       }},
      {1, /*at_last=*/true, [&](std::int64_t) { s.checkpoints->poll(); }},
      {c.train.eval_every, /*at_last=*/false,
       [&](std::int64_t step) {
         last_eval = run_eval(step);
         evaluated_last = true;
         window.start = Clock::now();  // keep eval time out of the training rate
       }},
  };

  StepHooks hooks;
  if (s.lead) {  // a checkpoint's state kept by an out-of-place update, or copied behind the passes
    hooks.before_update = [&] { return s.checkpoints->before_update(*s.optimizer); };
    hooks.after_update = [&](std::optional<OptimizerBlocks> before, double update_s) {
      s.checkpoints->after_update(std::move(before), update_s);
    };
  }
  std::optional<GradientReducer> reducer;  // phase 6, overlapped with phase 5 where it can be
  if (s.group->size() > 1) {
    reducer.emplace(*s.group, s.model.arena().grads(), s.model.queue());
    hooks.gradients_ready = [&](std::int64_t first) { reducer->ready(first); };
    hooks.reduce_gradients = [&](kernels::Tensor&, kernels::Queue&) { reducer->finish(); };
  }
  bool group_stop = false;  // agreed by all ranks after the last step
  std::vector<Teacher*> step_teachers;
  const auto started = Clock::now();
  bool interrupted = false;
  while (s.worker.step < last) {
    if (s.group->size() > 1 ? group_stop : stop_requested()) {
      interrupted = true;
      break;
    }
    step_teachers.clear();
    if (s.teachers) {
      if (s.lead) s.teachers->at_step(s.worker.step, s.metrics.get());  // every reload_every steps
      if (c.codistill.enabled) share_teachers(s.worker.step);             // a group's other ranks follow
      s.worker.teacher_steps.clear();
      for (const auto& t : s.teachers->teachers()) s.worker.teacher_steps.push_back({t->peer, t->step});
      // Fixed teachers teach from the first step; peers (forward only, on the same batch)
      // join after burn-in, since they start as untrained as this worker.
      for (const auto& t : s.teachers->fixed()) step_teachers.push_back(t.get());
      if (s.worker.step >= c.codistill.burn_in)
        for (const auto& t : s.teachers->teachers()) step_teachers.push_back(t.get());
    }
    lr = learning_rate(c.optimizer, s.worker.step, last);
    StepResult r = s.step->run(s.worker.step + 1, step_teachers, *s.optimizer, lr, hooks);
    ++s.worker.step;
    s.worker.examples_seen += B;
    evaluated_last = false;
    if (s.group->size() > 1) {
      const StepAgreement a = agree_after_step(*s.group, stop_requested(), r.loss.loss, r.loss.ce, r.loss.distill);
      group_stop = a.stop;
      r.loss.loss = a.loss;
      r.loss.ce = a.ce;
      r.loss.distill = a.distill;
    }
    window.add(r);
    if (s.lead)
      for (const Periodic& e : after_step)
        if (e.due(s.worker.step, last)) e.fire(s.worker.step);
    progress.update(s.worker.step, r.loss.loss, rate);
  }
  progress.finish();

  TrainSummary sum;
  sum.steps = s.worker.step;
  sum.interrupted = interrupted;
  if (reducer && s.worker.step > 0)
    info("gradient all-reduce: {} bucket(s) of at most {} floats, {} started while backward still ran (last step)",
         reducer->buckets(), s.group->options().bucket_bytes / sizeof(float), reducer->started_early());
  if (interrupted) info("stop requested: finished step {}, publishing a checkpoint and stopping", s.worker.step);
  if (!s.lead) return sum;  // rank 0 publishes, evaluates and reports for the group
  s.checkpoints->save(s.worker, /*overlap=*/false);  // the final state (no-op if published already)
  s.checkpoints->finish();
  if (!evaluated_last) last_eval = run_eval(s.worker.step);
  sum.wall_s = s.metrics->elapsed_s();  // the whole run, data loading included
  sum.test_loss = last_eval.loss;
  sum.test_accuracy = last_eval.accuracy;
  const double train_s = seconds_since(started) - eval_s;
  sum.examples_per_s = train_s > 0 ? static_cast<double>(s.worker.step * B) / train_s : 0;
  nlohmann::json done = {{"wall_s", sum.wall_s}, {"accuracy", sum.test_accuracy}, {"loss", sum.test_loss},
                         {"train_examples_per_s", sum.examples_per_s}, {"interrupted", interrupted}};
  if (text) done["perplexity"] = std::exp(sum.test_loss);
  s.metrics->emit("done", s.worker.step, done);
  if (text)
    info("done: {} steps in {} ({:.0f} training windows/s), held-out loss {:.4f} nats/token, perplexity {:.2f}, "
         "next-token accuracy {:.2f}%",
         s.worker.step, format_duration(sum.wall_s), sum.examples_per_s, sum.test_loss, std::exp(sum.test_loss),
         100 * sum.test_accuracy);
  else
    info("done: {} steps in {} ({:.0f} training ex/s), test accuracy {:.2f}%, test loss {:.4f}", s.worker.step,
         format_duration(sum.wall_s), sum.examples_per_s, 100 * sum.test_accuracy, sum.test_loss);
  return sum;
}

}  // namespace codistill
