// TeacherPool's elastic cohort (teachers/cohort.hpp): the re-read of the run directory at
// each reload, and sync mode's wait for a quorum of live peers.
#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codistill/teachers/teachers.hpp"
#include "codistill/util/run_errors.hpp"

namespace codistill {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// One peer sync mode waits for at a reload.
struct QuorumWait {
  int peer;
  bool teacher_failed = false, done = false;
  std::string why = "not published yet";
  std::string excused;  // why it cannot publish that step (then not waited for); "" if it can
};

// The `sync` event of a reload, and a warning naming the peers left behind.
void report_quorum(spdlog::logger& log, MetricsWriter* metrics, std::int64_t step, std::int64_t peer_step,
                   double waited_ms, std::size_t needed, int quorum, const std::vector<QuorumWait>& waits) {
  std::vector<int> loaded, left, excused;
  std::size_t came = 0;
  for (const auto& w : waits) {
    if (w.done) loaded.push_back(w.peer);
    came += w.done && w.excused.empty();
    if (!w.excused.empty()) excused.push_back(w.peer);
    else if (!w.done) left.push_back(w.peer);
  }
  if (metrics)
    metrics->emit("sync", step,
                  {{"peer_step", peer_step}, {"waited_ms", waited_ms}, {"quorum", needed}, {"loaded", loaded},
                   {"left_behind", left}, {"not_waited", excused}});
  if (!left.empty())
    log.warn("sync step {}: went on with {} live peer(s) (codistill.sync_quorum {}: {} needed) after {:.0f} ms; left "
             "behind: peer(s) {} (their previous teachers stay)",
             step, came, quorum, needed, waited_ms, fmt::join(left, ", "));
}
}  // namespace

void TeacherPool::refresh_cohort(MetricsWriter* metrics, std::int64_t step) {
  const CohortChange change = cohort_.refresh();
  if (!change.any()) return;
  peers_ = cohort_.teaching();
  // codistill.retired drop: a retired peer's teacher goes with it (teach: it stays, aging).
  std::erase_if(teachers_, [&](const auto& t) { return !contains(peers_, t->peer); });
  if (metrics)
    metrics->emit("cohort", step,
                  {{"joined", change.joined}, {"retired", change.retired}, {"live", cohort_.live()},
                   {"teaching", peers_}});
  log_->info("cohort at step {}: {}{}learning from peers [{}] (live: [{}])", step,
             change.joined.empty() ? "" : fmt::format("peer(s) {} joined; ", fmt::join(change.joined, ", ")),
             change.retired.empty() ? "" : fmt::format("peer(s) {} retired; ", fmt::join(change.retired, ", ")),
             fmt::join(peers_, ", "), fmt::join(cohort_.live(), ", "));
}

std::string TeacherPool::excused(int peer, std::int64_t peer_step) const {
  if (cohort_.is_retired(peer)) return "retired";
  // A joiner's first file is of a step after the one it joined at.
  if (const std::int64_t k = cohort_.joined_at(peer); k >= peer_step) return fmt::format("joined at step {}", k);
  // Past that step without its file (retention pruned it, or a peer that joined later than
  // any marker says): it never comes.
  const auto files = store_.checkpoints(peer);
  if (!files.empty() && files.back().step > peer_step)
    return fmt::format("published step {} but no longer step {}", files.back().step, peer_step);
  return "";
}

std::vector<std::unique_ptr<Teacher>> TeacherPool::load_quorum(std::int64_t step, MetricsWriter* metrics) {
  const auto& c = cfg_.codistill;
  const std::int64_t peer_step = step - c.reload_every;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(c.sync_timeout_s);
  std::vector<QuorumWait> waits;
  for (int p : peers_) waits.emplace_back().peer = p;
  std::vector<std::unique_ptr<Teacher>> loaded;
  std::size_t expected = 0, arrived = 0, needed = 0;
  auto next_refresh = t0 + std::chrono::seconds(1);
  for (;;) {
    expected = arrived = 0;
    for (auto& w : waits) {
      if (!w.done)
        if (auto t = try_exact(w.peer, peer_step, w.teacher_failed, w.why)) {
          t->load_ms = ms_since(t0);
          loaded.push_back(std::move(t));
          w.done = true;
        }
      // A peer that cannot publish that step is not waited for; its file is taken if there.
      w.excused = excused(w.peer, peer_step);
      if (w.excused.empty()) {
        ++expected;
        arrived += w.done;
      }
    }
    needed = c.sync_quorum > 0 ? std::min<std::size_t>(static_cast<std::size_t>(c.sync_quorum), expected) : expected;
    if (arrived >= needed) break;
    if (Clock::now() > deadline) {
      std::vector<std::string> missing;
      for (const auto& w : waits)
        if (!w.done && w.excused.empty())
          missing.push_back(fmt::format("peer {} ({}: {})", w.peer, store_.checkpoint_path(w.peer, peer_step), w.why));
      throw TrainingError(fmt::format("codistill.mode sync: waited {} s (codistill.sync_timeout_s) for the checkpoints "
                                      "of step {} of {} of {} live peer(s) (codistill.sync_quorum {}); {} came; "
                                      "missing: {}",
                                      c.sync_timeout_s, peer_step, needed, expected, c.sync_quorum, arrived,
                                      fmt::join(missing, "; ")));
    }
    // A peer may retire or join while it is waited for (a marker put in the folder of a
    // worker that is gone; a joiner's marker written after its folder): looked for each second.
    if (Clock::now() > next_refresh) {
      refresh_cohort(metrics, step);
      next_refresh = Clock::now() + std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  report_quorum(*log_, metrics, step, peer_step, ms_since(t0), needed, c.sync_quorum, waits);
  return loaded;
}

}  // namespace codistill
