#pragma once
// Which peers a worker learns from, re-read from the run directory (docs/training.md, "An
// elastic cohort"). The cohort is not fixed at start: a worker folder that appears (a
// worker started later with a higher --worker) is a peer from the next reload on, and one
// that holds a retirement marker (persist/membership.hpp) stops being waited for; a peer
// that joined at step k (its `joined` marker) is not waited for at the steps before k.
//   known:    worker ids 0..run.workers-1 as this worker was configured, and every
//             worker-XXX folder ever listed in the run directory, but this worker;
//   live:     known and not retired (sync mode waits for these, up to its quorum);
//   teaching: the peers whose files may teach: live, and the retired too with
//             codistill.retired teach; the first codistill.teachers of them by id (0: all,
//             up to kMaxTeachers).
// A listing that fails (a failing mount) changes nothing: the cohort stays as last seen.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/store.hpp"

namespace codistill {

// The most peers that teach one worker when codistill.teachers is 0 ("all").
inline constexpr int kMaxTeachers = 64;

struct CohortChange {
  std::vector<int> joined;   // peers first seen at this refresh
  std::vector<int> retired;  // peers whose retirement marker appeared at this refresh
  bool any() const { return !joined.empty() || !retired.empty(); }
};

class Cohort {
 public:
  // self: this worker's id; configured: run.workers; cap: codistill.teachers (0: all);
  // retired_teach: codistill.retired == "teach".
  Cohort(std::string run_dir, int self, int configured, int cap, bool retired_teach);

  // Lists the worker folders and reads their markers; what changed since the last refresh.
  CohortChange refresh();

  const std::vector<int>& known() const { return known_list_; }
  const std::vector<int>& live() const { return live_; }
  const std::vector<int>& teaching() const { return teaching_; }
  bool is_retired(int peer) const { return retired_.count(peer) > 0; }
  // The step a peer joined at (its `joined` marker), -1 for one that started with the run.
  std::int64_t joined_at(int peer) const;

 private:
  void derive();

  checkpoint::RunStore store_;
  int self_, cap_;
  bool retired_teach_;
  std::set<int> known_, retired_;
  std::map<int, std::int64_t> joined_;  // peer -> its `joined` marker's step
  std::vector<int> known_list_, live_, teaching_;
};

}  // namespace codistill
