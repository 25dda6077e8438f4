#pragma once
// The launch shape of every custom kernel (grid, block, dynamic shared memory, template
// variant) as plain host functions with no CUDA type: the .cu launchers call them, and the
// tests call the same functions to run the kernels under the SIMT executor with exactly
// the shapes a GPU gets. What the CUDA runtime would be asked (the device's SM count and
// L2 size, the occupancy of a kernel) comes in as arguments.
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

// ---- bias gradients: deterministic column and channel sums -------------------------------

constexpr int kColTile = 32, kRowLanes = 8;

struct ColumnSums {
  Launch sums;               // colsum_kernel: block (32, 8), grid (column tiles, row chunks)
  std::int64_t rows = 0;     // rows per chunk
  std::int64_t chunks = 0;
  Launch finish;             // colsum_finish_kernel, when chunks > 1
};

// db[n] = sum_m dy[m, n]: rows per chunk fixed by M alone (determinism), at least 256, few
// enough chunks for grid.y.
inline ColumnSums column_sums(std::int64_t M, std::int64_t N) {
  std::int64_t R = 256;
  while ((M + R - 1) / R > 65535) R *= 2;
  const std::int64_t chunks = (M + R - 1) / R;
  const std::int64_t tiles = (N + kColTile - 1) / kColTile;
  if (tiles > 0x7fffffff)
    throw std::invalid_argument("bias gradient (cuda): too many columns: " + std::to_string(N));
  ColumnSums c;
  c.sums = {{static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)},
            {kColTile, kRowLanes}, 0};
  c.rows = R, c.chunks = chunks;
  c.finish = elementwise(N);
  return c;
}

struct ChannelSums {
  Launch sums;                // channel_sum_kernel: a block per (channel, chunk of images)
  std::int64_t images = 0;    // images per chunk
  std::int64_t chunks = 0;
  Launch finish;              // colsum_finish_kernel over C, when chunks > 1
};

// db[c] = sum_{b,s} dy[b, c, s]: about 16K elements per block, fixed by the shape.
inline ChannelSums channel_sums(std::int64_t B, std::int64_t C, std::int64_t S) {
  if (C > 0x7fffffff) throw std::invalid_argument("bias_grad_channels (cuda): too many channels");
  std::int64_t IB = S >= 16384 ? 1 : (16384 + S - 1) / S;
  while ((B + IB - 1) / IB > 65535) IB *= 2;
  ChannelSums c;
  c.images = IB;
  c.chunks = (B + IB - 1) / IB;
  c.sums = {{static_cast<unsigned>(C), static_cast<unsigned>(c.chunks)}, {kElementwiseThreads}, 0};
  c.finish = elementwise(C);
  return c;
}

// ---- batch normalization: chunks of a channel, a block each -----------------------------

constexpr std::int64_t kBatchNormChunk = 4096;  // a channel's values per block: 16 per thread
constexpr std::int64_t kBatchNormMaxChunks = 1024;

struct BatchNormLaunch {
  std::int64_t chunks = 1, per_chunk = 1;  // blocks per channel, values per block (the last fewer)
  Launch pass;                             // grid {C, chunks}, whole warps per block
  std::size_t partial_bytes = 0;           // scratch: 2 doubles per (channel, chunk)
};

// 256 threads, fewer for a chunk of few values (still whole warps).
inline BatchNormLaunch batchnorm(std::int64_t C, std::int64_t per_channel) {
  if (C > 0x7fffffff) throw std::invalid_argument("batchnorm (cuda): too many channels");
  BatchNormLaunch b;
  const std::int64_t M = per_channel < 1 ? 1 : per_channel;
  b.chunks = std::clamp<std::int64_t>((M + kBatchNormChunk - 1) / kBatchNormChunk, 1, kBatchNormMaxChunks);
  b.per_chunk = (M + b.chunks - 1) / b.chunks;
  const std::int64_t warps = std::clamp<std::int64_t>((b.per_chunk + kWarp - 1) / kWarp, 1, kElementwiseThreads / kWarp);
  b.pass = {{static_cast<unsigned>(C < 1 ? 1 : C), static_cast<unsigned>(b.chunks)}, {static_cast<unsigned>(warps * kWarp)}, 0};
  b.partial_bytes = 2 * static_cast<std::size_t>(C) * static_cast<std::size_t>(b.chunks) * sizeof(double);
  return b;
}

// A block per row of `features` values (layer normalization): up to 256 threads.
inline Launch layernorm_rows(std::int64_t rows, std::int64_t features) {
  if (rows > 0x7fffffff) throw std::invalid_argument("layernorm (cuda): too many rows");
  const std::int64_t warps = std::clamp<std::int64_t>((features + kWarp - 1) / kWarp, 1, kElementwiseThreads / kWarp);
  return {{static_cast<unsigned>(rows < 1 ? 1 : rows)}, {static_cast<unsigned>(warps * kWarp)}, 0};
}

// ---- embedding (device/embedding.cuh) ---------------------------------------------------

// The id check: a grid-stride loop over the rows, at most 1024 blocks of 256.
inline Launch embedding_check(std::int64_t rows) {
  return {{static_cast<unsigned>(std::clamp<std::int64_t>((rows + 255) / 256, 1, 1024))}, {256}, 0};
}

constexpr int kScatterBandsPerBlock = 8;             // block (32 columns, 8 bands)
constexpr std::int64_t kScatterTargetThreads = 1 << 17;  // enough warps to fill a large GPU

struct EmbeddingScatter {
  Launch pass;                 // grid (column tiles, band groups), block (32, 8)
  std::int64_t band_width = 1; // vocabulary rows per band
};

// Bands of the vocabulary so that columns x bands make about kScatterTargetThreads threads
// (each warp walks all rows, so more bands cost more id reads, fewer leave SMs idle). The
// result does not depend on this choice: every element still sums its rows in order.
inline EmbeddingScatter embedding_scatter(std::int64_t vocab, std::int64_t dim) {
  const std::int64_t tiles = (dim + kWarp - 1) / kWarp;
  if (tiles > 0x7fffffff) throw std::invalid_argument("embedding backward (cuda): too many columns");
  std::int64_t bands = std::clamp<std::int64_t>(kScatterTargetThreads / (tiles * kWarp), 1, vocab < 1 ? 1 : vocab);
  EmbeddingScatter e;
  e.band_width = (vocab + bands - 1) / bands;
  bands = (vocab + e.band_width - 1) / e.band_width;
  const std::int64_t groups = (bands + kScatterBandsPerBlock - 1) / kScatterBandsPerBlock;
  e.pass = {{static_cast<unsigned>(tiles), static_cast<unsigned>(groups < 1 ? 1 : groups)},
            {kWarp, kScatterBandsPerBlock},
            0};
  return e;
}

// ---- causal attention: a warp per score row (device/attention.cuh) ----------------------

constexpr int kAttentionRowThreads = 256;  // 8 rows per block

inline Launch attention_rows(std::int64_t rows) {
  return {{grid_for(rows, kAttentionRowThreads / kWarp)}, {kAttentionRowThreads}, 0};
}

// ---- optimizer updates: a block per chunk of parameters ---------------------------------

constexpr std::int64_t kOptimizerChunk = 4096;  // elements per block: 16 per thread
constexpr int kOptimizerThreads = 256;

inline Launch optimizer(std::int64_t chunks) {
  if (chunks > 0x7fffffff)
    throw std::invalid_argument("optimizer step (cuda): too many parameters for one launch");
  return {{static_cast<unsigned>(chunks)}, {kOptimizerThreads}, 0};
}

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
