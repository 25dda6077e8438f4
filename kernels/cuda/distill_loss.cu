// The fused distillation loss on CUDA (see distill_loss.hpp) for float32 and bfloat16
// logits, modelled on llm.c's fused classifier; the kernel itself is in
// distill_loss_kernel.cuh. Here: argument checks, label validation, the launch shape and
// the final sums.
// Labels are validated by a small kernel first, so that a bad label throws before anything
// is written, as on the CPU (and the count of rows gives the gradient's scale). Per-row CE
// and T^2 KL go to a device buffer; a one-block kernel sums them in double in a fixed
// order, so a result is reproducible bit for bit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/distill_loss_kernel.cuh"

namespace codistill::kernels::cuda {
namespace {

using bf16 = __nv_bfloat16;
using distill_detail::Args;
using distill_detail::distill_loss_kernel;
using distill_detail::kLog2e;
using distill_detail::kWarp;

// header[0] = rows counted, header[1] = first row with a label outside [-1, V) (N if none).
__global__ void check_labels_kernel(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                                    unsigned long long* header) {
  unsigned long long counted = 0;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < N;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t y = labels[r];
    if (y == -1) continue;
    if (y < -1 || y >= V) atomicMin(&header[1], static_cast<unsigned long long>(r));
    else ++counted;
  }
  if (counted) atomicAdd(&header[0], counted);
}

// sums[0] = sum of per-row CE, sums[1] = sum of per-row T^2 KL, in double, fixed order.
constexpr int kReduceThreads = 256;
__global__ void sum_rows_kernel(const float* row_terms, std::int64_t N, double* sums) {
  __shared__ double s[2][kReduceThreads];
  double ce = 0, kl = 0;
  for (std::int64_t r = threadIdx.x; r < N; r += kReduceThreads) {
    ce += row_terms[2 * r];
    kl += row_terms[2 * r + 1];
  }
  s[0][threadIdx.x] = ce;
  s[1][threadIdx.x] = kl;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      s[0][threadIdx.x] += s[0][threadIdx.x + half];
      s[1][threadIdx.x] += s[1][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[0] = s[0][0], sums[1] = s[1][0];
}

// Scratch device memory for one call, freed on every path out (stream-ordered).
struct Scratch {
  void* ptr = nullptr;
  cudaStream_t stream;
  Scratch(std::size_t bytes, cudaStream_t s) : stream(s) {
    CODISTILL_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, stream));
  }
  ~Scratch() { cudaFreeAsync(ptr, stream); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

template <class T>
void check_args(const T* student, const T* const* teachers, int K, const std::int32_t* labels,
                std::int64_t N, std::int64_t V, const cpu::DistillLossParams& p) {
  if (N <= 0 || V <= 0 || N > INT32_MAX || V > INT32_MAX)
    throw std::invalid_argument("distill_loss (cuda): need 0 < N, V < 2^31, got N=" +
                                std::to_string(N) + " V=" + std::to_string(V));
  if (K < 0 || K > 4096)
    throw std::invalid_argument("distill_loss (cuda): K must be in [0, 4096], got " +
                                std::to_string(K));
  if (!(p.temperature > 0) || !std::isfinite(p.temperature))
    throw std::invalid_argument("distill_loss (cuda): temperature must be finite and > 0, got " +
                                std::to_string(p.temperature));
  if (!student || !labels)
    throw std::invalid_argument("distill_loss (cuda): null student or labels");
  for (int k = 0; k < K; ++k)
    if (!teachers || !teachers[k])
      throw std::invalid_argument("distill_loss (cuda): teacher " + std::to_string(k) + " is null");
}

// Launches the kernel shape for this V: a warp per row up to 2048 classes (8 rows per
// block), else a block per row, wider for longer rows.
template <class T, int kThreads, int kGroup, int kVec>
void launch_shape(const Args<T>& args, int device, cudaStream_t stream) {
  constexpr int kRows = kThreads / kGroup;
  const std::size_t smem = sizeof(float) * 2 * args.K * kRows;
  const auto& info = detail::device_info(device);
  const auto kernel = distill_loss_kernel<T, kThreads, kGroup, kVec>;
  // A persistent grid: one wave of resident blocks walks all rows. For long rows fewer
  // blocks per SM, so that the rows in flight (re-read by pass 2) stay within half the L2,
  // but never under 1024 threads per SM (fewer cannot keep enough loads in flight).
  // Untuned: to be measured against the device copy bandwidth (bench/).
  int per_sm = 1;
  CODISTILL_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  per_sm = std::max(1, per_sm);
  const int min_per_sm = std::max(1, 1024 / kThreads);
  const double row_bytes = static_cast<double>(args.K + 1) * args.V * sizeof(T);
  while (per_sm > min_per_sm && static_cast<double>(info.sms) * per_sm * kRows * row_bytes >
                                    0.5 * static_cast<double>(info.l2_bytes))
    --per_sm;
  const std::int64_t needed = (static_cast<std::int64_t>(args.N) + kRows - 1) / kRows;
  const auto grid =
      static_cast<unsigned>(std::min<std::int64_t>(needed, std::int64_t{info.sms} * per_sm));
  kernel<<<grid, kThreads, smem, stream>>>(args);
}

template <class T, int kVec>
void launch_vec(const Args<T>& args, int device, cudaStream_t stream) {
  // The warp shape keeps 8 rows of teacher statistics in shared memory: many teachers
  // go to the block shapes (one row each).
  if (args.V <= 2048 && args.K <= 256) launch_shape<T, 256, kWarp, kVec>(args, device, stream);
  else if (args.V <= 8192) launch_shape<T, 256, 256, kVec>(args, device, stream);
  else if (args.V <= 16384) launch_shape<T, 512, 512, kVec>(args, device, stream);
  else launch_shape<T, 1024, 1024, kVec>(args, device, stream);
}

bool aligned(const void* p, std::size_t to) {
  return reinterpret_cast<std::uintptr_t>(p) % to == 0;
}

template <class T>
cpu::DistillLossResult run(const T* student, const T* const* teachers, int K,
                           const std::int32_t* labels, T* grad, std::int64_t N, std::int64_t V,
                           const cpu::DistillLossParams& p, int device, void* stream_ptr) {
  check_args(student, teachers, K, labels, N, V, p);
  CODISTILL_CUDA_CHECK(cudaSetDevice(device));
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  // Layout: 2 u64 header | 2 double sums | K teacher pointers | 2N float row terms.
  const std::size_t off_sums = 16, off_ptrs = 32;
  const std::size_t off_terms = off_ptrs + 8 * static_cast<std::size_t>(K);
  Scratch scratch(off_terms + 8 * static_cast<std::size_t>(N), stream);
  auto* base = static_cast<char*>(scratch.ptr);
  auto* header = reinterpret_cast<unsigned long long*>(base);
  auto* sums = reinterpret_cast<double*>(base + off_sums);
  auto* ptrs = reinterpret_cast<const T**>(base + off_ptrs);
  auto* terms = reinterpret_cast<float*>(base + off_terms);

  const unsigned long long init[2] = {0, static_cast<unsigned long long>(N)};
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(header, init, sizeof init, cudaMemcpyHostToDevice, stream));
  if (K > 0)
    CODISTILL_CUDA_CHECK(
        cudaMemcpyAsync(ptrs, teachers, sizeof(T*) * K, cudaMemcpyHostToDevice, stream));
  const int check_blocks = static_cast<int>(std::min<std::int64_t>((N + 255) / 256, 1024));
  check_labels_kernel<<<check_blocks, 256, 0, stream>>>(labels, N, V, header);
  CODISTILL_CUDA_LAUNCH_CHECK();
  unsigned long long got[2];
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(got, header, sizeof got, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (got[1] < static_cast<unsigned long long>(N)) {
    std::int32_t bad = 0;
    CODISTILL_CUDA_CHECK(
        cudaMemcpyAsync(&bad, labels + got[1], sizeof bad, cudaMemcpyDeviceToHost, stream));
    CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
    throw std::out_of_range("distill_loss (cuda): row " + std::to_string(got[1]) + " has label " +
                            std::to_string(bad) + ", expected -1 (ignore) or a class in [0, " +
                            std::to_string(V) + ")");
  }
  const auto rows = static_cast<std::int64_t>(got[0]);
  if (rows == 0) {  // every row ignored
    if (grad) CODISTILL_CUDA_CHECK(cudaMemsetAsync(grad, 0, sizeof(T) * N * V, stream));
    CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
    return cpu::DistillLossResult{};
  }

  const double scale = 1.0 / static_cast<double>(rows);
  const bool shared = K == 0 || p.temperature == 1.0;
  Args<T> args{student, ptrs, K, labels, grad, static_cast<int>(N), static_cast<int>(V), shared,
               kLog2e, shared ? kLog2e : static_cast<float>(1.4426950408889634 / p.temperature),
               static_cast<float>(p.temperature * p.temperature),
               static_cast<float>(scale * p.hard_weight),
               static_cast<float>(scale * p.weight * p.temperature), terms};
  // Vector loads need V % 4 == 0 and every row aligned to 4 elements.
  bool vec = V % 4 == 0 && aligned(student, 4 * sizeof(T)) && aligned(grad, 4 * sizeof(T));
  for (int k = 0; k < K; ++k) vec = vec && aligned(teachers[k], 4 * sizeof(T));
  if (vec) launch_vec<T, 4>(args, device, stream);
  else launch_vec<T, 1>(args, device, stream);
  CODISTILL_CUDA_LAUNCH_CHECK();
  sum_rows_kernel<<<1, kReduceThreads, 0, stream>>>(terms, N, sums);
  CODISTILL_CUDA_LAUNCH_CHECK();
  double host_sums[2];
  CODISTILL_CUDA_CHECK(
      cudaMemcpyAsync(host_sums, sums, sizeof host_sums, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));

  cpu::DistillLossResult res;
  res.rows = rows;
  res.ce = host_sums[0] * scale;
  res.distill = host_sums[1] * scale;
  res.loss = p.hard_weight * res.ce + p.weight * res.distill;
  return res;
}

}  // namespace

cpu::DistillLossResult distill_loss(const float* student, const float* const* teachers, int K,
                                    const std::int32_t* labels, float* grad, std::int64_t N,
                                    std::int64_t V, const cpu::DistillLossParams& p, int device,
                                    void* stream) {
  return run<float>(student, teachers, K, labels, grad, N, V, p, device, stream);
}

cpu::DistillLossResult distill_loss_bf16(const std::uint16_t* student,
                                         const std::uint16_t* const* teachers, int K,
                                         const std::int32_t* labels, std::uint16_t* grad,
                                         std::int64_t N, std::int64_t V,
                                         const cpu::DistillLossParams& p, int device,
                                         void* stream) {
  // Raw bf16 bits and __nv_bfloat16 have the same size and layout.
  static_assert(sizeof(bf16) == sizeof(std::uint16_t));
  return run<bf16>(reinterpret_cast<const bf16*>(student),
                   reinterpret_cast<const bf16* const*>(teachers), K, labels,
                   reinterpret_cast<bf16*>(grad), N, V, p, device, stream);
}

}  // namespace codistill::kernels::cuda
