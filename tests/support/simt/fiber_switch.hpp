#pragma once
// The executor's fiber switches announced to AddressSanitizer (a no-op without it).
#include <cstddef>

// SIMT_ASAN: built with AddressSanitizer. GCC says so with __SANITIZE_ADDRESS__, clang 14
// only through __has_feature: testing the macro alone left every switch unannounced under
// clang, and an exception thrown on a fiber stack then made ASan report false overflows.
#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif

#if defined(SIMT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace simt::detail {

// AddressSanitizer must be told of every stack switch (fcontext's are invisible to it):
// start_switch before leaving a stack, finish_switch first thing on arrival.
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};
#if defined(SIMT_ASAN)
inline void start_switch(void** fake, const StackBounds& to) {
  __sanitizer_start_switch_fiber(fake, to.bottom, to.size);
}
inline void finish_switch(void* fake, StackBounds* from) {
  __sanitizer_finish_switch_fiber(fake, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
}
#else
inline void start_switch(void**, const StackBounds&) {}
inline void finish_switch(void*, StackBounds*) {}
#endif

}  // namespace simt::detail
