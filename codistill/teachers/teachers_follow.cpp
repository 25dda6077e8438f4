// TeacherPool::follow: the teachers of a worker group's ranks other than 0 (train/group.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "codistill/util/run_errors.hpp"
#include "codistill/teachers/teachers.hpp"

namespace codistill {

void TeacherPool::follow(const std::vector<checkpoint::TeacherStep>& chosen, MetricsWriter* metrics,
                         std::int64_t step) {
  std::erase_if(teachers_, [&](const auto& t) {
    return std::find(chosen.begin(), chosen.end(), checkpoint::TeacherStep{t->peer, t->step}) == chosen.end();
  });
  std::vector<std::unique_ptr<Teacher>> fresh;
  for (const auto& ts : chosen) {
    const int peer = static_cast<int>(ts.worker);
    const bool held = std::any_of(teachers_.begin(), teachers_.end(),
                                  [&](const auto& t) { return t->peer == peer && t->step == ts.step; });
    if (held) continue;
    // Rank 0 alone reads the cohort (a peer that joined since this rank started is one too).
    if (peer < 0 || peer == cfg_.run.worker)
      throw TrainingError(fmt::format("rank 0 uses peer {} as a teacher, which is not a peer of this worker", peer));
    const std::string path = store_.checkpoint_path(peer, ts.step);
    // A reader of a node whose writer published this teacher maps it (train/training.cpp
    // orders the writers before the readers); else, and where that fails, its own copy.
    if (sharing_.enabled && !sharing_.writer) {
      std::string why;
      if (auto t = map_shared(peer, ts.step, why)) {
        log_->info("teacher sharing: peer {} at step {} mapped from {}", peer, ts.step, t->shared_path);
        fresh.push_back(std::move(t));
        continue;
      }
      log_->warn("teacher sharing: peer {} at step {}: {}; loading this rank's own copy", peer, ts.step, why);
    }
    try {
      fresh.push_back(load_step(peer, ts.step, 0));
    } catch (const TrainingError&) {
      throw;
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("step {}: cannot load peer {}'s checkpoint of step {} that rank 0 teaches "
                                      "with ({}): {}",
                                      step, peer, ts.step, path, e.what()));
    }
  }
  adopt(take_loaded(std::move(fresh), /*wait=*/true), metrics, step);
}

}  // namespace codistill
