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

#include "codistill/persist/membership.hpp"
#include "codistill/train/group.hpp"
#include "codistill/train/memory_report.hpp"
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

// One run of the loop: the step's hooks, the every-N events and their reports, the
// group's agreement after each step, and the end of the run.
class RunLoop {
 public:
  RunLoop(Trainer::State& s, std::function<void(std::int64_t)> share_teachers)
      : s_(s), c_(s.cfg), share_teachers_(std::move(share_teachers)),
        B_(c_.data.batch_size * s.group->size()), last_(c_.train.steps),
        progress_(last_, s.learner.worker.step, s.opts.interactive && s.lead) {
    after_step_ = {
        {c_.train.log_every, /*at_last=*/true, [this](std::int64_t step) { report_train(step); }},
        {c_.checkpoint.every, /*at_last=*/false,
         [this](std::int64_t) {
           progress_.clear();
           s_.checkpoints->save(s_.learner.worker);
         }},
        {1, /*at_last=*/true, [this](std::int64_t) { s_.checkpoints->poll(); }},
        {c_.train.eval_every, /*at_last=*/false,
         [this](std::int64_t step) {
           last_eval_ = evaluate(step);
           evaluated_last_ = true;
           window_.start = Clock::now();  // keep eval time out of the training rate
         }},
    };
    make_hooks();
  }

  std::int64_t last() const { return last_; }

  void announce() {
    const std::int64_t K = c_.train.micro_batches;
    info("training {} steps of batch {}{} on {} ({} threads), shard {} as worker {}/{}", last_, B_,
         K > 1 ? fmt::format(" (gradients summed over {} micro-batches of {})", K, c_.data.batch_size / K) : "",
         c_.device, c_.run.threads, s_.learner.modality->data().shard, c_.run.worker, c_.run.workers);
  }

  // A stop requested, or a retirement marker seen (on a group: agreed by every rank after
  // the last step).
  bool stopping() const { return s_.group->size() > 1 ? group_stop_ : stop_requested() || marker_seen_; }
  // run.retire_at reached: every rank knows it from the config.
  bool retire_due() const { return c_.run.retire_at > 0 && s_.learner.worker.step >= c_.run.retire_at; }

  // One step and the events after it.
  void step() {
    const std::vector<Teacher*>& teachers = teachers_for_step();
    lr_ = learning_rate(c_.optimizer, s_.learner.worker.step, last_);
    StepResult r = s_.learner.step->run(s_.learner.worker.step + 1, teachers, *s_.learner.optimizer, lr_, hooks_);
    ++s_.learner.worker.step;
    s_.learner.worker.examples_seen += B_;
    evaluated_last_ = false;
    // A retirement marker someone put in this worker's folder (persist/retirement.hpp),
    // looked for every log_every steps by rank 0.
    if (s_.lead && s_.learner.worker.step % c_.train.log_every == 0)
      marker_seen_ = read_marker(s_.files.paths.worker_dir, kRetiredMarker).has_value();
    if (s_.group->size() > 1) {
      const StepAgreement a =
          agree_after_step(*s_.group, stop_requested() || marker_seen_, r.loss.loss, r.loss.ce, r.loss.distill);
      group_stop_ = a.stop;
      r.loss.loss = a.loss;
      r.loss.ce = a.ce;
      r.loss.distill = a.distill;
    }
    window_.add(r);
    if (s_.lead)
      for (const Periodic& e : after_step_)
        if (e.due(s_.learner.worker.step, last_)) e.fire(s_.learner.worker.step);
    progress_.update(s_.learner.worker.step, r.loss.loss, rate_);
  }

  // The end of the run, finished or interrupted: rank 0 publishes the final checkpoint,
  // evaluates where the last step did not, and writes `done`.
  TrainSummary finish(bool interrupted, Clock::time_point started) {
    progress_.finish();
    // A retirement (run.retire_at, or a marker in the folder) ends the run as it is: not an
    // interruption to resume from, and its marker is published after the final checkpoint.
    const bool retired = retire_due() || (s_.lead && read_marker(s_.files.paths.worker_dir, kRetiredMarker).has_value());
    if (retired) interrupted = false;
    TrainSummary sum;
    sum.steps = s_.learner.worker.step;
    sum.interrupted = interrupted;
    if (reducer_ && s_.learner.worker.step > 0)
      info("gradient all-reduce: {} bucket(s) of at most {} floats, {} started while backward still ran (last step)",
           reducer_->buckets(), s_.group->options().bucket_bytes / sizeof(float), reducer_->started_early());
    if (interrupted) info("stop requested: finished step {}, publishing a checkpoint and stopping", s_.learner.worker.step);
    if (!s_.lead) return sum;  // rank 0 publishes, evaluates and reports for the group
    s_.checkpoints->save(s_.learner.worker, /*overlap=*/false);  // the final state (no-op if published already)
    s_.checkpoints->finish();
    if (retired) retire();
    if (!evaluated_last_) last_eval_ = evaluate(s_.learner.worker.step);
    sum.wall_s = s_.files.metrics->elapsed_s();  // the whole run, data loading included
    sum.test_loss = last_eval_.loss;
    sum.test_accuracy = last_eval_.accuracy;
    const double train_s = seconds_since(started) - eval_s_;
    sum.examples_per_s = train_s > 0 ? static_cast<double>(s_.learner.worker.step * B_) / train_s : 0;
    nlohmann::json done = {{"wall_s", sum.wall_s}, {"accuracy", sum.test_accuracy}, {"loss", sum.test_loss},
                           {"train_examples_per_s", sum.examples_per_s}, {"interrupted", interrupted}};
    if (retired) done["retired"] = true;
    s_.learner.modality->add_done_fields(done, sum.test_loss);
    setup::report_measured_memory(s_);
    s_.files.metrics->emit("done", s_.learner.worker.step, done);
    info("{}", s_.learner.modality->done_line(s_.learner.worker.step, format_duration(sum.wall_s), sum.examples_per_s, last_eval_));
    return sum;
  }

 private:
  // Log lines clear the in-place progress line first, so the two never interleave.
  template <class... A>
  void info(fmt::format_string<A...> format, A&&... args) {
    progress_.clear();
    s_.log->info(format, std::forward<A>(args)...);
  }

  // Publishes the retirement marker (its final checkpoint is out): peers stop counting
  // this worker from their next reload.
  void retire() {
    const std::string reason = retire_due() ? "run.retire_at" : "marker";
    write_marker(s_.files.paths.worker_dir, kRetiredMarker, c_.run.worker, Membership{s_.learner.worker.step, reason});
    s_.files.metrics->emit("cohort", s_.learner.worker.step,
                     {{"retired", std::vector<int>{c_.run.worker}}, {"reason", reason}});
    info("retired at step {} ({}): {} published; peers stop waiting for this worker", s_.learner.worker.step, reason,
         marker_path(s_.files.paths.worker_dir, kRetiredMarker));
  }

  void make_hooks() {
    if (s_.lead) {  // a checkpoint's state kept by an out-of-place update, or copied behind the passes
      hooks_.before_update = [this] { return s_.checkpoints->before_update(*s_.learner.optimizer); };
      hooks_.after_update = [this](std::optional<OptimizerBlocks> before, double update_s) {
        s_.checkpoints->after_update(std::move(before), update_s);
      };
    }
    if (s_.group->size() > 1) {  // phase 6, overlapped with phase 5 where it can be
      reducer_.emplace(*s_.group, s_.learner.model.arena().grads(), s_.learner.model.queue());
      hooks_.gradients_ready = [this](std::int64_t first) { reducer_->ready(first); };
      hooks_.reduce_gradients = [this](kernels::Tensor&, kernels::Queue&) { reducer_->finish(); };
    }
  }

  // The teachers of the coming step, after the reload due at it (codistill.reload_every).
  const std::vector<Teacher*>& teachers_for_step() {
    step_teachers_.clear();
    if (!s_.teachers) return step_teachers_;
    if (s_.lead) s_.teachers->at_step(s_.learner.worker.step, s_.files.metrics.get());  // every reload_every steps
    if (c_.codistill.enabled) share_teachers_(s_.learner.worker.step);            // a group's other ranks follow
    s_.learner.worker.teacher_steps.clear();
    for (const auto& t : s_.teachers->teachers()) s_.learner.worker.teacher_steps.push_back({t->peer, t->step});
    // Fixed teachers teach from the first step; peers (forward only, on the same batch)
    // join after burn-in, since they start as untrained as this worker.
    for (const auto& t : s_.teachers->fixed()) step_teachers_.push_back(t.get());
    if (s_.learner.worker.step >= c_.codistill.burn_in)
      for (const auto& t : s_.teachers->teachers()) step_teachers_.push_back(t.get());
    return step_teachers_;
  }

  void report_train(std::int64_t step) {
    const double secs = seconds_since(window_.start);
    rate_ = secs > 0 ? static_cast<double>(window_.steps * B_) / secs : 0;
    const double n = static_cast<double>(window_.steps);
    nlohmann::json staleness = nullptr;
    if (s_.teachers && window_.teachers > 0)
      if (auto st = s_.teachers->staleness(step)) staleness = *st;
    nlohmann::json fields = {{"loss", window_.loss / n}, {"ce", window_.ce / n}, {"distill", window_.distill / n},
                             {"lr", lr_}, {"examples_per_s", rate_}, {"teachers", window_.teachers},
                             {"staleness", staleness}};
    if (auto g = s_.learner.optimizer->last_grad_norm()) fields["grad_norm"] = *g;  // optimizer.clip_grad_norm
    s_.learner.modality->add_train_fields(fields, rate_);
    s_.files.metrics->emit("train", step, fields);
    // A language model's rate in tokens (a window a second would print as "0 ex/s").
    const std::string rate = fields.contains("tokens_per_s")
                                 ? fmt::format("{:.0f} tokens/s", fields["tokens_per_s"].get<double>())
                                 : fmt::format("{:.0f} ex/s", rate_);
    if (!s_.opts.interactive)
      info("train step {:>7}/{}  loss {:.4f}  distill {:.4f}  teachers {}  lr {:.4g}  {}", step, last_,
           window_.loss / n, window_.distill / n, window_.teachers, lr_, rate);
    window_.reset();
  }

  // The student's measure, and churn against every teacher in use: the fraction of test
  // examples (tokens for text) whose predicted class differs (DESIGN.md section 7).
  EvalResult evaluate(std::int64_t step) {
    const auto t = Clock::now();
    std::vector<std::int32_t> mine, theirs;
    EvalResult r = s_.learner.modality->evaluate(s_.learner.model, &mine);
    nlohmann::json churn = nlohmann::json::object();
    auto add_churn = [&](Teacher& teacher) {
      s_.learner.modality->evaluate(teacher.model, &theirs);
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < mine.size(); ++i) differ += mine[i] != theirs[i];
      churn[teacher.label()] = static_cast<double>(differ) / static_cast<double>(mine.size());
    };
    if (s_.teachers) {
      for (const auto& teacher : s_.teachers->teachers()) add_churn(*teacher);
      for (const auto& teacher : s_.teachers->fixed()) add_churn(*teacher);
    }
    nlohmann::json fields = {{"split", "test"}, {"loss", r.loss}, {"accuracy", r.accuracy}, {"churn", churn}};
    s_.learner.modality->add_eval_fields(fields, r);
    s_.files.metrics->emit("eval", step, fields);
    info("{}", s_.learner.modality->eval_line(step, r, seconds_since(t)));
    eval_s_ += seconds_since(t);
    return r;
  }

  Trainer::State& s_;
  const Config& c_;
  std::function<void(std::int64_t)> share_teachers_;
  const std::int64_t B_;  // the examples of one step, over all the group's ranks
  const std::int64_t last_;
  Progress progress_;
  Window window_;
  std::vector<Periodic> after_step_;
  StepHooks hooks_;
  std::optional<GradientReducer> reducer_;
  std::vector<Teacher*> step_teachers_;
  double rate_ = 0, eval_s_ = 0, lr_ = 0;  // eval time is kept out of the training throughput
  EvalResult last_eval_;
  bool evaluated_last_ = false;
  bool group_stop_ = false;  // agreed by all ranks after the last step
  bool marker_seen_ = false;  // rank 0 saw a retirement marker in this worker's folder
};

}  // namespace

TrainSummary Trainer::run() {
  RunLoop loop(*s_, [this](std::int64_t step) { share_teachers(step); });
  loop.announce();
  const auto started = Clock::now();
  bool interrupted = false;
  while (s_->learner.worker.step < loop.last() && !loop.retire_due()) {
    if (loop.stopping()) {
      interrupted = true;
      break;
    }
    loop.step();
  }
  return loop.finish(interrupted, started);
}

}  // namespace codistill
