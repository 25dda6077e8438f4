#pragma once
// What a kernel header sees instead of <cuda_runtime.h> and <cuda_bf16.h> when the host
// compiler builds it for the SIMT executor (kernels/cuda/device_api.cuh switches). Only
// what the project's kernels use is here; a kernel that needs more fails to compile in the
// tests first, which is where it should be added.
//
// Shared memory: a block-scope `__shared__` array becomes a `static thread_local` one. The
// executor runs the blocks of a launch one at a time on the launching thread, so that is one
// array per running block (it is not re-poisoned between blocks; dynamic shared memory is).
// Dynamic shared memory is reached through simt::dynamic_shared(), not `extern __shared__`.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "simt/bf16.hpp"
#include "simt/runtime.hpp"
#include "simt/vector_types.hpp"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static thread_local

#define threadIdx (::simt::detail::coords().thread_idx)
#define blockIdx (::simt::detail::coords().block_idx)
#define blockDim (::simt::detail::coords().block_dim)
#define gridDim (::simt::detail::coords().grid_dim)
constexpr int warpSize = 32;

// ---- barriers and warp collectives ------------------------------------------------------
// Each takes its call site as a trailing defaulted argument, for SIMT_MUTANT (mutant.hpp).
// GCC gives the caller's site only for std::source_location::current() as the default
// argument itself; clang 14 with libstdc++ has no std::source_location, but its
// __builtin_FILE/LINE/COLUMN in a default argument give the caller's site too.
#if __has_builtin(__builtin_COLUMN)
namespace simt::detail {
using CallSite = Site;
inline const Site& site_of(const Site& s) { return s; }
}  // namespace simt::detail
#define SIMT_CALL_SITE ::simt::detail::Site{__builtin_FILE(), __builtin_LINE(), __builtin_COLUMN()}
#else
#include <source_location>
namespace simt::detail {
using CallSite = std::source_location;
inline Site site_of(const std::source_location& l) {
  return {l.file_name(), static_cast<unsigned>(l.line()), static_cast<unsigned>(l.column())};
}
}  // namespace simt::detail
#define SIMT_CALL_SITE std::source_location::current()
#endif

inline void __syncthreads(::simt::detail::CallSite at = SIMT_CALL_SITE) {
  ::simt::detail::sync_block(::simt::detail::site_of(at));
}
inline void __syncwarp(unsigned mask = 0xffffffffu, ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  ::simt::detail::warp_collective(::simt::detail::Collective::syncwarp, mask, 0, 0, 32,
                                  ::simt::detail::site_of(at));
}

namespace simt::detail {
template <class T>
std::uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "warp shuffles move 4- or 8-byte values");
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
T from_bits(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}
template <class T>
T shuffle(Collective kind, unsigned mask, T v, int arg, int width, const CallSite& at) {
  return from_bits<T>(warp_collective(kind, mask, to_bits(v), arg, width, site_of(at)));
}
inline std::uint64_t vote(Collective kind, unsigned mask, int pred, const CallSite& at) {
  return warp_collective(kind, mask, pred != 0, 0, 32, site_of(at));
}
}  // namespace simt::detail

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32,
              ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return ::simt::detail::shuffle(::simt::detail::Collective::shfl_idx, mask, v, src_lane, width, at);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return ::simt::detail::shuffle(::simt::detail::Collective::shfl_up, mask, v,
                                 static_cast<int>(delta), width, at);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                   ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return ::simt::detail::shuffle(::simt::detail::Collective::shfl_down, mask, v,
                                 static_cast<int>(delta), width, at);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return ::simt::detail::shuffle(::simt::detail::Collective::shfl_xor, mask, v, lane_mask, width,
                                 at);
}
inline unsigned __ballot_sync(unsigned mask, int pred, ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return static_cast<unsigned>(::simt::detail::vote(::simt::detail::Collective::ballot, mask, pred, at));
}
inline int __any_sync(unsigned mask, int pred, ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return static_cast<int>(::simt::detail::vote(::simt::detail::Collective::any, mask, pred, at));
}
inline int __all_sync(unsigned mask, int pred, ::simt::detail::CallSite at = SIMT_CALL_SITE) {
  return static_cast<int>(::simt::detail::vote(::simt::detail::Collective::all, mask, pred, at));
}
#undef SIMT_CALL_SITE
inline unsigned __activemask() { return ::simt::detail::active_mask(); }

[[noreturn]] inline void __trap() { ::simt::detail::fault("__trap() called"); }

// ---- math -------------------------------------------------------------------------------

// Explicitly rounded operations: defined in another translation unit (math.cpp, built with
// -ffp-contract=off), so the host compiler cannot fuse a __fmul_rn into an FMA.
float __fadd_rn(float a, float b);
float __fsub_rn(float a, float b);
float __fmul_rn(float a, float b);
float __fdiv_rn(float a, float b);
float __fsqrt_rn(float a);
float __fmaf_rn(float a, float b, float c);
double __dadd_rn(double a, double b);
double __dmul_rn(double a, double b);

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp2f(float x) { return std::exp2(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN → 0

inline float __uint_as_float(unsigned u) { return ::simt::detail::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return static_cast<unsigned>(::simt::detail::to_bits(f)); }
inline float __int_as_float(int i) { return ::simt::detail::from_bits<float>(static_cast<unsigned>(i)); }
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline long long __double_as_longlong(double d) { return static_cast<long long>(::simt::detail::to_bits(d)); }
inline double __longlong_as_double(long long v) {
  return ::simt::detail::from_bits<double>(static_cast<std::uint64_t>(v));
}

// ---- cache-hint loads and stores: alignment checked as a GPU would fault -----------------

namespace simt::detail {
template <class T>
T checked_load(const T* p, const char* op) {
  check_aligned(p, alignof(T), sizeof(T), op);
  return *p;
}
template <class T>
void checked_store(T* p, const T& v, const char* op) {
  check_aligned(p, alignof(T), sizeof(T), op);
  *p = v;
}
}  // namespace simt::detail

template <class T> T __ldg(const T* p) { return ::simt::detail::checked_load(p, "__ldg"); }
template <class T> T __ldcs(const T* p) { return ::simt::detail::checked_load(p, "__ldcs"); }
template <class T> T __ldcg(const T* p) { return ::simt::detail::checked_load(p, "__ldcg"); }
template <class T> T __ldca(const T* p) { return ::simt::detail::checked_load(p, "__ldca"); }
template <class T> T __ldlu(const T* p) { return ::simt::detail::checked_load(p, "__ldlu"); }
template <class T> T __ldcv(const T* p) { return ::simt::detail::checked_load(p, "__ldcv"); }
template <class T> void __stcs(T* p, T v) { ::simt::detail::checked_store(p, v, "__stcs"); }
template <class T> void __stcg(T* p, T v) { ::simt::detail::checked_store(p, v, "__stcg"); }
template <class T> void __stwb(T* p, T v) { ::simt::detail::checked_store(p, v, "__stwb"); }
template <class T> void __stwt(T* p, T v) { ::simt::detail::checked_store(p, v, "__stwt"); }

// ---- atomics (std::atomic_ref: correct even if blocks ever run on several threads) -------

namespace simt::detail {
template <class T>
std::atomic_ref<T> atomic(T* p, const char* op) {
  check_aligned(p, alignof(T), sizeof(T), op);
  return std::atomic_ref<T>(*p);
}
}  // namespace simt::detail

template <class T>
T atomicAdd(T* p, std::type_identity_t<T> v) {
  return ::simt::detail::atomic(p, "atomicAdd").fetch_add(v);
}
template <class T>
T atomicSub(T* p, std::type_identity_t<T> v) {
  return ::simt::detail::atomic(p, "atomicSub").fetch_sub(v);
}
template <class T>
T atomicExch(T* p, std::type_identity_t<T> v) {
  return ::simt::detail::atomic(p, "atomicExch").exchange(v);
}
template <class T>
T atomicCAS(T* p, std::type_identity_t<T> expected, std::type_identity_t<T> desired) {
  ::simt::detail::atomic(p, "atomicCAS").compare_exchange_strong(expected, desired);
  return expected;  // the old value either way
}
template <class T>
T atomicMin(T* p, std::type_identity_t<T> v) {
  auto a = ::simt::detail::atomic(p, "atomicMin");
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicMax(T* p, std::type_identity_t<T> v) {
  auto a = ::simt::detail::atomic(p, "atomicMax");
  T old = a.load();
  while (v > old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
