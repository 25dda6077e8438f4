#pragma once
// The door of every call into a group whose collectives cannot be cancelled (kinds mpi and
// nccl). Private to codistill/dist/: no MPI or NCCL type, and no other folder includes it.
//
// Why one door for both: after any error such a group is unusable (process_group.hpp says
// why), and calls from two threads must not overlap (MPI at MPI_THREAD_SERIALIZED; NCCL's
// non-blocking calls must not interleave either). The door turns a broken promise into a
// ProcessGroupError instead of memory corruption inside the library. It keeps no deadline:
// each group polls its own collectives against GroupOptions::timeout.
#include <atomic>
#include <functional>
#include <string>

namespace codistill::dist {

// A group's side of the door: why an earlier error made the group unusable, and whether a
// thread is inside it now.
class CallGate {
 public:
  // `who`: the group's error prefix (ProcessGroup::who), asked only when a call is refused
  // (rank and size may not be known yet when the gate is made). `overlap_rule`: the end of
  // the message to a second thread, saying why calls into the group must not overlap.
  CallGate(std::function<std::string()> who, std::string overlap_rule);

  bool usable() const { return broken_.empty(); }
  // Every later call is refused, naming `why`.
  void mark_broken(std::string why) { broken_ = std::move(why); }

 private:
  friend class CallGuard;
  std::function<std::string()> who_;
  std::string overlap_rule_;
  std::string broken_;  // empty while the group is usable
  std::atomic<bool> inside_{false};
};

// One call into the group, for the guard's scope. Throws ProcessGroupError, leaving the gate
// as it was, when the group is unusable or another thread is inside; `what` names the call
// in the message.
class CallGuard {
 public:
  CallGuard(CallGate& gate, const char* what);
  ~CallGuard() { gate_.inside_.store(false); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  CallGate& gate_;
};

}  // namespace codistill::dist
