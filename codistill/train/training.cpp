#include "codistill/train/training.hpp"

#include <atomic>
#include <cerrno>
#include <span>
#include <system_error>
#include <thread>

#include <pthread.h>
#include <signal.h>

#include <fmt/ranges.h>

#include "codistill/train/group.hpp"
#include "codistill/train/memory_report.hpp"
#include "codistill/train/trainer_setup.hpp"
#include "codistill/train/trainer_state.hpp"

namespace codistill {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

// SIGINT and SIGTERM are taken by a thread of their own (sigwait) and blocked in every other
// thread that the caller starts afterwards: its OpenMP team, the checkpoint writer, the
// loaders. Why: oneDNN 2.6's JIT sgemm (Debian 12's libdnnl) points rsp into a heap buffer
// while it runs, so the kernel's signal frame for a handler on that thread lands in the heap
// (oneDNN issue #4845, reproduced up to 3.11, fixed upstream by PR #4855); one SIGTERM,
// landing on the main thread in the backward's GEMMs, crashed about 1 trainer in 150 (SIGSEGV
// or abort in free). Threads started before the first call (OpenBLAS's pool, made when the
// library loads) still take them through the handler, which each call installs again (and
// blocks the signals in the caller again), in case a library set up in between (MPI) changed
// either. None of those threads runs our kernels.
void install_stop_signal_handlers() {
  sigset_t stops;
  sigemptyset(&stops);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    if (::sigaction(sig, &sa, nullptr) != 0)
      throw std::system_error(errno, std::generic_category(), "installing the SIGINT/SIGTERM handler");
    sigaddset(&stops, sig);
  }
  // Every call (a library set up in between may have changed the caller's mask).
  sigset_t before;
  if (int err = ::pthread_sigmask(SIG_BLOCK, &stops, &before))
    throw std::system_error(err, std::generic_category(), "blocking SIGINT and SIGTERM");
  try {
    static const bool waiting = [&stops] {
      std::thread([stops] {
        for (;;) {
          int sig = 0;
          if (::sigwait(&stops, &sig) == 0) g_stop.store(true);
        }
      }).detach();
      return true;
    }();
    (void)waiting;
  } catch (...) {  // no thread to take them: leave them deliverable, as before the call
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    throw;
  }
}
void request_stop() { g_stop.store(true); }
bool stop_requested() { return g_stop.load(); }

Trainer::Trainer(Config cfg, TrainOptions opts) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = std::move(cfg);
  s.opts = std::move(opts);
  // The phases of trainer_setup.hpp, in their order: the refusals of a device, a config key,
  // a finished worker, another run or group size in the directory come before
  // claim_run_dir writes anything, and the model is restored on the host before it moves.
  setup::Pending p;
  setup::choose_device(s);
  setup::make_logger(s);
  setup::load_data_and_model(s, p);
  setup::find_resume_point(s, p);
  setup::apply_init_from(s, p);
  setup::plan_memory(s);  // a run that will not fit stops here (exit 2)
  setup::claim_run_dir(s, p);
  setup::log_start(s, p);
  s.learner.optimizer = make_optimizer(s.cfg.optimizer, s.learner.model);
  setup::make_batch_source(s, p);
  setup::restore_and_place(s, p);
  setup::make_step(s, p);
  setup::report_memory_plan(s);  // in the log and metrics.jsonl, at the step the run starts from
  setup::start_teachers(s, p);
  const CodistillConfig& cd = s.cfg.codistill;
  if (cd.enabled) {
    share_teachers(s.learner.worker.step);  // a group's other ranks take rank 0's
    s.log->info("codistillation ({} mode) with peers [{}], burn-in {} steps, reload every {}, weight {}, "
                "temperature {}",
                cd.mode, fmt::join(s.teachers->peers(), ", "), cd.burn_in, cd.reload_every, cd.weight,
                cd.temperature);
  }
}

void Trainer::share_teachers(std::int64_t step) {
  auto& s = *s_;
  if (s.group->size() == 1) return;
  std::vector<checkpoint::TeacherStep> mine;
  for (const auto& t : s.teachers->teachers()) mine.push_back({t->peer, t->step});
  const auto chosen = share_teacher_steps(*s.group, mine, s.teachers->max_teachers());
  const TeacherSharing& sharing = s.teachers->sharing();
  if (!sharing.coordinated || !s.teachers->chosen_changed(chosen)) {
    if (!s.lead) s.teachers->follow(chosen, s.files.metrics.get(), step);
    return;
  }
  // Shared teachers: each node's writer loads and publishes first (rank 0's are published
  // already: it adopts a teacher only once loaded), the barrier, then the others map the
  // files (train/group.hpp plan_teacher_sharing).
  const bool reader = sharing.enabled && !sharing.writer;
  if (!s.lead && !reader) s.teachers->follow(chosen, s.files.metrics.get(), step);
  s.group->barrier();
  if (!s.lead && reader) s.teachers->follow(chosen, s.files.metrics.get(), step);
  // Ranks other than 0 log warnings only: rank 0 says how the group holds its teachers.
  float held[2] = {0, 0};  // on shared files, own copies
  for (const auto& t : s.teachers->teachers()) held[t->shared_path.empty() ? 1 : 0] += 1;
  s.group->all_reduce_sum(std::span<float>(held, 2));
  if (s.lead)
    s.log->info("teacher sharing: the group's {} ranks hold {} teacher copies: {} mapped from shared files, {} "
                "their own",
                s.group->size(), held[0] + held[1], held[0], held[1]);
}

Trainer::~Trainer() = default;
Model& Trainer::model() { return s_->learner.model; }
const Config& Trainer::config() const { return s_->cfg; }

}  // namespace codistill
