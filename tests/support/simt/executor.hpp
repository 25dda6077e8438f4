#pragma once
// The SIMT executor's host side: launching a kernel compiled from its real CUDA source by
// the host compiler (through cuda_shim.hpp), and exact-size poisoned buffers for tests.
//
// Model: the blocks of a launch run one after another, in an order shuffled from the seed.
// Each thread of a block is a fiber (Boost.Context). A thread runs until it reaches a
// collective (__syncthreads, __syncwarp, a shuffle or a vote) or exits; the scheduler then
// resumes the runnable thread that the seed's policy picks (schedule.hpp: at random, or by
// random warp or thread priorities, so that one warp runs ahead while another lags). A
// collective completes when all its participants arrived: a missing barrier lets a reader
// run before the writer, or a writer overwrite what another warp has not read yet, for some
// seeds, and a barrier in divergent code is reported as a deadlock. SIMT_MUTANT makes one
// collective of the kernels' source act as if edited (mutant.hpp).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "simt/runtime.hpp"

namespace simt {

struct LaunchConfig {
  dim3 grid, block;
  std::size_t dynamic_smem = 0;
  bool smem_opt_in = false;  // cudaFuncSetAttribute(MaxDynamicSharedMemorySize) was called
  std::uint64_t seed = 0;
};

// Device limits the launch is checked against (compute capability 9.0).
struct Limits {
  static constexpr unsigned max_threads = 1024;
  static constexpr unsigned max_block[3] = {1024, 1024, 64};
  static constexpr unsigned long long max_grid[3] = {2147483647ull, 65535, 65535};
  static constexpr std::size_t default_smem = 48 * 1024;
  static constexpr std::size_t opt_in_smem = 227 * 1024;
};

// Throws LaunchError when a GPU would refuse cfg.
void check_launch(const LaunchConfig& cfg);

namespace detail {
void run_grid(const LaunchConfig& cfg, const std::function<void()>& thread_body);
}

// kernel<<<cfg.grid, cfg.block, cfg.dynamic_smem>>>(args...): the arguments are converted
// to the parameter types and copied once, as a launch does. Throws LaunchError or
// KernelFault; returns when every thread of every block has finished.
template <class... P, class... A>
void launch(void (*kernel)(P...), const LaunchConfig& cfg, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "simt::launch: wrong number of kernel arguments");
  const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
  detail::run_grid(cfg, [&] { std::apply([&](const auto&... a) { kernel(a...); }, params); });
}

// Fiber switches (thread resumptions) since the process started: for cost measurements.
std::uint64_t switch_count();

// Device-memory stand-in for tests: an allocation of exactly the requested bytes (plus an
// optional leading offset to make a misaligned view), so AddressSanitizer reports any access
// past either end, filled with 0xff bytes (NaN for float/double/bf16, -1 for integers).
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n, std::size_t byte_offset = 0)
      : n_(n), offset_(byte_offset),
        raw_(static_cast<unsigned char*>(::operator new(n * sizeof(T) + byte_offset,
                                                        std::align_val_t{64}))) {
    poison();
  }
  DeviceBuffer(const std::vector<T>& v, std::size_t byte_offset = 0)
      : DeviceBuffer(v.size(), byte_offset) {
    upload(v);
  }
  ~DeviceBuffer() { ::operator delete(raw_, std::align_val_t{64}); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return reinterpret_cast<T*>(raw_ + offset_); }
  const T* data() const { return reinterpret_cast<const T*>(raw_ + offset_); }
  std::size_t size() const { return n_; }
  void poison() { std::memset(raw_, 0xff, n_ * sizeof(T) + offset_); }
  void upload(const std::vector<T>& v) {
    if (v.size() != n_) throw std::invalid_argument("DeviceBuffer::upload: size mismatch");
    if (n_) std::memcpy(raw_ + offset_, v.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    if (n_) std::memcpy(v.data(), raw_ + offset_, n_ * sizeof(T));
    return v;
  }

 private:
  std::size_t n_, offset_;
  unsigned char* raw_;
};

}  // namespace simt
