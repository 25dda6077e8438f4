#pragma once
// The SIMT executor's schedule policies: which runnable thread of a block runs next. A thread
// runs from one collective to the next in one step, so what a policy can expose is the order
// of those steps. The seed picks the policy (policy_for_seed), so a test that loops over a
// few seeds gets all three:
//   uniform          any runnable thread, chosen at random: a reader that a missing barrier
//                    no longer holds back runs before the writer for most seeds.
//   warp priority    PCT (probabilistic concurrency testing, Burckhardt et al. 2010) over
//                    warps: a random priority per warp, the highest-priority warp with a
//                    runnable lane always runs (its lanes in random order). One warp runs
//                    through the next phase, up to the next barrier, before a lower one
//                    has read what the last phase left: a slot that a missing barrier no
//                    longer protects is overwritten under it (write after read), which the
//                    uniform policy almost never shows (a whole warp would have to pass
//                    several collectives while one lane of another is never picked).
//   thread priority  PCT over threads: the same with a priority per thread, so one thread
//                    lags behind every other of its block (and its lanes' order inside a
//                    warp is fixed), e.g. the lane that writes a value its warp reads.
// Both priority policies demote the running warp or thread below all others at two random
// change points, so that the order is not fixed for a whole launch. Everything is drawn
// from the block's seed: a seed gives the same schedule every time.
#include <cstdint>
#include <random>
#include <vector>

namespace simt::detail {

enum class Policy { uniform, warp_priority, thread_priority };

// seed % 3: 0 uniform, 1 warp priority, 2 thread priority; SIMT_SCHEDULE=uniform,
// warp-priority or thread-priority gives every seed that one (to tell which policy exposes
// a bug; throws std::invalid_argument for another value).
Policy policy_for_seed(std::uint64_t seed);
const char* policy_name(Policy p);  // as SIMT_SCHEDULE spells it

class Schedule {
 public:
  // A block of `threads` threads (warps of 32 by linear index), none runnable yet.
  void start(Policy policy, std::uint64_t block_seed, unsigned threads);
  // Thread t (linear index) became runnable.
  void push(unsigned t);
  bool empty() const { return policy_ == Policy::uniform ? runnable_.empty() : heap_.empty(); }
  // The thread to run next, no longer runnable.
  unsigned pop();

 private:
  struct Entry {
    std::uint64_t key;  // higher runs first
    unsigned thread;
  };
  static bool lower_key(const Entry& a, const Entry& b) { return a.key < b.key; }
  std::uint64_t key(unsigned t);
  void demote(unsigned t);

  Policy policy_ = Policy::uniform;
  std::mt19937_64 rng_;
  std::vector<unsigned> runnable_;          // uniform
  std::vector<Entry> heap_;                 // priority policies: a max-heap on key
  std::vector<std::uint32_t> priority_;     // per warp or per thread
  std::uint32_t lowest_ = 0;                // below every priority given so far
  std::vector<std::uint64_t> change_at_;    // step numbers at which the running one is demoted
  std::uint64_t steps_ = 0;
};

}  // namespace simt::detail
