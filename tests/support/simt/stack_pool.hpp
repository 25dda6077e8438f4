#pragma once
// Fiber stacks for the executor, kept between blocks: a launch of many 1024-thread blocks
// would otherwise map and unmap a guarded stack per thread per block. Each stack has a
// guard page below it (protected_fixedsize_stack), so a kernel that overflows its stack
// faults instead of corrupting a neighbour.
#include <boost/context/protected_fixedsize_stack.hpp>
#include <boost/context/stack_context.hpp>

#include <cstddef>
#include <vector>

#include "simt/fiber_switch.hpp"  // SIMT_ASAN

#if defined(SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace simt::detail {

class StackPool {
 public:
  // AddressSanitizer's redzones and fake frames need more room.
#if defined(SIMT_ASAN)
  static constexpr std::size_t kStackBytes = 512 * 1024;
#else
  static constexpr std::size_t kStackBytes = 128 * 1024;
#endif

  ~StackPool() {
    for (auto& sc : free_) make_.deallocate(sc);
  }
  boost::context::stack_context allocate() {
    if (free_.empty()) return make_.allocate();
    auto sc = free_.back();
    free_.pop_back();
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
#if defined(SIMT_ASAN)
    // Frames left by the last fiber must not poison the next one's.
    __asan_unpoison_memory_region(static_cast<char*>(sc.sp) - sc.size, sc.size);
#endif
    free_.push_back(sc);
  }

  static StackPool& local() {
    thread_local StackPool pool;
    return pool;
  }

 private:
  boost::context::protected_fixedsize_stack make_{kStackBytes};
  std::vector<boost::context::stack_context> free_;
};

// The allocator handed to boost::context::fiber: a handle on the calling thread's pool.
// `last` (optional) receives the stack handed out: AddressSanitizer needs its bounds.
struct PooledStack {
  boost::context::stack_context* last = nullptr;
  boost::context::stack_context allocate() {
    auto sc = StackPool::local().allocate();
    if (last) *last = sc;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
    StackPool::local().deallocate(sc);
  }
};

}  // namespace simt::detail
