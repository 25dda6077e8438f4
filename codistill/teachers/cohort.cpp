#include "codistill/teachers/cohort.hpp"

#include "codistill/persist/membership.hpp"

namespace codistill {

Cohort::Cohort(std::string run_dir, int self, int configured, int cap, bool retired_teach)
    : store_(std::move(run_dir)), self_(self), cap_(cap > 0 ? cap : kMaxTeachers), retired_teach_(retired_teach) {
  for (int w = 0; w < configured; ++w)
    if (w != self_) known_.insert(w);
  derive();
}

CohortChange Cohort::refresh() {
  CohortChange change;
  for (int w : store_.workers()) {
    if (w == self_) continue;
    if (known_.insert(w).second) change.joined.push_back(w);
  }
  // A marker never goes away for a peer already counted as retired: a folder that cannot be
  // read for a moment must not bring a retired worker back into sync mode's wait. A joiner
  // writes its `joined` marker a moment after its folder appears: looked for until seen.
  for (int w : known_) {
    const std::string dir = store_.worker_dir(w);
    if (!joined_.count(w))
      if (auto m = read_marker(dir, kJoinedMarker)) joined_[w] = m->step;
    if (!retired_.count(w) && read_marker(dir, kRetiredMarker)) {
      retired_.insert(w);
      change.retired.push_back(w);
    }
  }
  if (change.any()) derive();
  return change;
}

std::int64_t Cohort::joined_at(int peer) const {
  auto it = joined_.find(peer);
  return it == joined_.end() ? -1 : it->second;
}

void Cohort::derive() {
  known_list_.assign(known_.begin(), known_.end());
  live_.clear();
  teaching_.clear();
  for (int w : known_) {
    const bool retired = retired_.count(w) > 0;
    if (!retired) live_.push_back(w);
    if ((!retired || retired_teach_) && static_cast<int>(teaching_.size()) < cap_)
      teaching_.push_back(w);
  }
}

}  // namespace codistill
