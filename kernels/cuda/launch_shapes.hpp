#pragma once
// Launch shapes (grid, block, dynamic shared memory, template variant) as plain host
// functions with no CUDA type: the .cu launchers call them, and the tests call the same
// functions to run the kernels under the SIMT executor with exactly the shapes a GPU gets.
// What the CUDA runtime would be asked (the device's SM count and L2 size, the occupancy of
// a kernel) comes in as arguments. Here: what every kernel uses (Launch, the grid-stride
// elementwise shape) and the fused loss's shapes (its device header is near the size
// limit); an op's own shapes sit beside its kernels, in kernels/cuda/device/<op>.cuh.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace codistill::kernels::cuda::shapes {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct Launch {
  Dim3 grid, block;
  std::size_t smem = 0;  // dynamic shared memory, bytes
};

// What the shapes depend on: cudaDeviceProp's multiprocessor count and L2 size.
struct DeviceProps {
  int sms = 1;
  std::int64_t l2_bytes = 0;
};

constexpr int kWarp = 32;

// ---- grid-stride elementwise kernels (activations, bias, multiply, add, pooling) --------

constexpr int kElementwiseThreads = 256;

// Blocks for a grid-stride loop over n items, capped so that a huge n does not launch more
// blocks than a device keeps busy (each thread then walks several items).
inline unsigned grid_for(std::int64_t n, int threads, std::int64_t max_blocks = 65536) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

inline Launch elementwise(std::int64_t n) {
  return {{grid_for(n, kElementwiseThreads)}, {kElementwiseThreads}, 0};
}

// uint32 indexing when index + grid stride cannot wrap (cheaper division on a GPU).
inline bool small_index(std::int64_t n) { return n <= (std::int64_t{1} << 31); }

// ---- the fused distillation loss ---------------------------------------------------------

// Rows are validated by check_labels_kernel (at most 1024 blocks of 256) and the per-row
// terms summed by one block of kReduceThreads.
constexpr int kReduceThreads = 256;
inline Launch check_labels(std::int64_t N) {
  return {{static_cast<unsigned>(std::clamp<std::int64_t>((N + 255) / 256, 1, 1024))}, {256}, 0};
}
inline Launch sum_rows() { return {{1}, {kReduceThreads}, 0}; }

// Which instance of distill_loss_kernel<T, threads, group, vec> runs: a group of threads
// owns a row, a warp for small V (threads / 32 rows per block), else the whole block.
struct DistillVariant {
  int threads = 256;
  int group = kWarp;
  int vec = 1;  // 4: 128-bit (float) or 64-bit (bf16) loads; needs V % 4 == 0, aligned rows
  int rows_per_block() const { return threads / group; }
  bool operator==(const DistillVariant&) const = default;
};

inline DistillVariant distill_loss_variant(std::int64_t V, int K, bool vectorizable) {
  const int vec = vectorizable ? 4 : 1;
  // The warp shape keeps 8 rows of teacher statistics in shared memory: many teachers go
  // to the block shapes (one row each).
  if (V <= 2048 && K <= 256) return {256, kWarp, vec};
  if (V <= 8192) return {256, 256, vec};
  if (V <= 16384) return {512, 512, vec};
  return {1024, 1024, vec};
}

// Dynamic shared memory: per row of the block, each teacher's max and log2 of its sum.
inline std::size_t distill_loss_smem(const DistillVariant& v, int K) {
  return sizeof(float) * 2 * static_cast<std::size_t>(K) * v.rows_per_block();
}

// A persistent grid: one wave of resident blocks walks all rows. For long rows fewer blocks
// per SM, so that the rows in flight (re-read by pass 2) stay within half the L2, but never
// under 1024 threads per SM (fewer cannot keep enough loads in flight). occupancy: what
// cudaOccupancyMaxActiveBlocksPerMultiprocessor says for this variant and smem.
inline Launch distill_loss(const DistillVariant& v, std::int64_t N, std::int64_t V, int K,
                           std::size_t elem_bytes, const DeviceProps& dev, int occupancy) {
  const int rows = v.rows_per_block();
  int per_sm = std::max(1, occupancy);
  const int min_per_sm = std::max(1, 1024 / v.threads);
  const double row_bytes = static_cast<double>(K + 1) * static_cast<double>(V) *
                           static_cast<double>(elem_bytes);
  while (per_sm > min_per_sm && static_cast<double>(dev.sms) * per_sm * rows * row_bytes >
                                    0.5 * static_cast<double>(dev.l2_bytes))
    --per_sm;
  const std::int64_t needed = (N + rows - 1) / rows;
  const auto grid = static_cast<unsigned>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(needed, std::int64_t{dev.sms} * per_sm)));
  return {{grid}, {static_cast<unsigned>(v.threads)}, distill_loss_smem(v, K)};
}

}  // namespace codistill::kernels::cuda::shapes
