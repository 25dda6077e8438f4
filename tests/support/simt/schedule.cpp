// The schedule policies of the SIMT executor (see schedule.hpp).
#include "simt/schedule.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace simt::detail {
namespace {

constexpr unsigned kWarp = 32;
// PCT's depth d = 3: two change points, drawn among the first kStepsPerThread * threads
// steps (a step: one thread from one collective to the next; the kernels here take a few
// to a few dozen steps per thread, so most change points fall inside the launch).
constexpr int kChangePoints = 2;
constexpr std::uint64_t kStepsPerThread = 16;
// Priorities start here; demotions count down from just below, so a demoted warp or thread
// runs after every one not demoted yet, and after those demoted earlier.
constexpr std::uint32_t kFirstPriority = 1u << 20;

// SIMT_SCHEDULE=uniform|warp-priority|thread-priority: every seed gets that policy (to see
// which policy exposes a bug); unset or empty: the seed chooses.
int forced_policy() {
  const char* env = std::getenv("SIMT_SCHEDULE");
  if (!env || !*env) return -1;
  for (Policy p : {Policy::uniform, Policy::warp_priority, Policy::thread_priority})
    if (std::strcmp(env, policy_name(p)) == 0) return static_cast<int>(p);
  throw std::invalid_argument(std::string("SIMT_SCHEDULE='") + env +
                              "': expected uniform, warp-priority or thread-priority");
}

}  // namespace

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::uniform: return "uniform";
    case Policy::warp_priority: return "warp-priority";
    default: return "thread-priority";
  }
}

Policy policy_for_seed(std::uint64_t seed) {
  static const int forced = forced_policy();
  if (forced >= 0) return static_cast<Policy>(forced);
  switch (seed % 3) {
    case 0: return Policy::uniform;
    case 1: return Policy::warp_priority;
    default: return Policy::thread_priority;
  }
}

void Schedule::start(Policy policy, std::uint64_t block_seed, unsigned threads) {
  policy_ = policy;
  rng_.seed(block_seed);
  runnable_.clear();
  heap_.clear();
  steps_ = 0;
  change_at_.clear();
  if (policy == Policy::uniform) return;
  // A random permutation of priorities over the warps or the threads.
  const unsigned n = policy == Policy::warp_priority ? (threads + kWarp - 1) / kWarp : threads;
  priority_.resize(n);
  std::iota(priority_.begin(), priority_.end(), kFirstPriority);
  std::shuffle(priority_.begin(), priority_.end(), rng_);
  lowest_ = kFirstPriority;
  for (int i = 0; i < kChangePoints; ++i) change_at_.push_back(rng_() % (kStepsPerThread * threads));
}

// Warp priority: the warp's priority above 32 random bits drawn at each push, so lanes of
// one warp run in random order; thread priority: the thread's own.
std::uint64_t Schedule::key(unsigned t) {
  if (policy_ == Policy::thread_priority) return priority_[t];
  return static_cast<std::uint64_t>(priority_[t / kWarp]) << 32 | (rng_() & 0xffffffffu);
}

void Schedule::demote(unsigned t) {
  priority_[policy_ == Policy::thread_priority ? t : t / kWarp] = --lowest_;
}

void Schedule::push(unsigned t) {
  if (policy_ == Policy::uniform) {
    runnable_.push_back(t);
    return;
  }
  heap_.push_back({key(t), t});
  std::push_heap(heap_.begin(), heap_.end(), lower_key);
}

unsigned Schedule::pop() {
  if (policy_ == Policy::uniform) {
    // The original executor's draw, kept so that uniform seeds schedule as before.
    const std::size_t pick = rng_() % runnable_.size();
    const unsigned t = runnable_[pick];
    runnable_[pick] = runnable_.back();
    runnable_.pop_back();
    return t;
  }
  for (;;) {
    std::pop_heap(heap_.begin(), heap_.end(), lower_key);
    const Entry e = heap_.back();
    heap_.pop_back();
    // A lane queued before its warp was demoted carries the old priority: queue it again.
    if (policy_ == Policy::warp_priority && e.key >> 32 != priority_[e.thread / kWarp]) {
      push(e.thread);
      continue;
    }
    const std::uint64_t step = steps_++;
    if (std::find(change_at_.begin(), change_at_.end(), step) != change_at_.end()) demote(e.thread);
    return e.thread;
  }
}

}  // namespace simt::detail
