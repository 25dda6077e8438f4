#pragma once
// What device code compiled for the SIMT executor calls into: the running thread's
// coordinates, the block barrier and the warp collectives, dynamic shared memory and kernel
// faults. The scheduler behind these is in executor.cpp; kernels reach them through the
// CUDA spellings of cuda_shim.hpp, tests through executor.hpp.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "simt/vector_types.hpp"

namespace simt {

// A launch a GPU would refuse (too many threads per block, too much shared memory, ...).
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// What would crash, hang or trap on a GPU: a deadlock at a barrier, a collective whose lanes
// disagree, a misaligned access, __trap, an exception out of device code.
struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

struct Coords {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};

// The running thread's coordinates; throws std::logic_error outside a kernel. Out of line:
// the thread-local behind it stays inside executor.cpp (an `extern thread_local` read from
// the kernels' translation units went through TLS wrappers that UBSan reported as null).
const Coords& coords();

enum class Collective : int { syncwarp, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all };

// Where a collective is called in the kernel's source (the shim passes it): SIMT_MUTANT
// matches it (mutant.hpp).
struct Site {
  const char* file;
  unsigned line, column;
};

void sync_block(const Site& at);
// Every lane of mask (in the caller's warp) arrives with its value; returns the caller's
// result (the source lane's bits for shuffles, the vote for ballot/any/all).
std::uint64_t warp_collective(Collective kind, unsigned mask, std::uint64_t bits, int arg,
                              int width, const Site& at);
unsigned active_mask();
void* dynamic_shared();
[[noreturn]] void fault(const std::string& what);
void check_aligned(const void* p, std::size_t alignment, std::size_t bytes, const char* op);

}  // namespace detail

// The current block's dynamic shared memory (LaunchConfig::dynamic_smem bytes, 16-byte
// aligned, poisoned before the block starts).
inline void* dynamic_shared() { return detail::dynamic_shared(); }

}  // namespace simt
