// The fused distillation loss on CUDA (see distill_loss.hpp), modelled on llm.c's fused
// classifier: one thread block per row.
//   pass 1  online softmax statistics (running max and rescaled sums) of the student and
//           of each teacher, merged across the block with warp shuffles and shared memory
//   pass 2  per element: p, p_T, q, the KL term and the gradient, written where z was read
//           (grad may alias the student)
// Per-row CE and T^2 KL go to a device buffer; a one-block kernel sums them in double in a
// fixed order, so a result is reproducible bit for bit. Labels are validated by a small
// kernel first, so that a bad label throws before anything is written, as on the CPU.
// Left for later (see the bf16 / bandwidth issue): vectorized 128-bit loads, several rows
// per block for small V, bf16 logits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/distill_loss.hpp"

namespace codistill::kernels::cuda {
namespace {

constexpr int kWarp = 32;

// Online softmax state over a set of x: m = max x, s1 = sum exp((x - m) * mul1) and
// st = sum exp((x - m) * mul2) (st used for the student only, when T != 1).
struct Online {
  float m, s1, st;
};

__device__ __forceinline__ void push(Online& o, float x, float mul1, float mul2, bool two) {
  if (x == -INFINITY) return;  // a masked logit adds nothing (and -inf - -inf is NaN)
  if (x > o.m) {
    const float d = o.m - x;  // -inf for the first element: exp gives 0
    o.s1 *= expf(d * mul1);
    if (two) o.st *= expf(d * mul2);
    o.m = x;
  }
  const float d = x - o.m;
  o.s1 += expf(d * mul1);
  if (two) o.st += expf(d * mul2);
}

__device__ __forceinline__ Online merge(Online a, Online b, float mul1, float mul2) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty
  const float da = a.m - m, db = b.m - m;
  return {m, a.s1 * expf(da * mul1) + b.s1 * expf(db * mul1),
          a.st * expf(da * mul2) + b.st * expf(db * mul2)};
}

// Block-wide merge; every thread gets the result. smem holds one state per warp.
__device__ Online block_merge(Online v, float mul1, float mul2, Online* smem) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const Online other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s1, o),
                       __shfl_xor_sync(0xffffffffu, v.st, o)};
    v = merge(v, other, mul1, mul2);
  }
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : Online{-INFINITY, 0.0f, 0.0f};
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const Online other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s1, o),
                       __shfl_xor_sync(0xffffffffu, v.st, o)};
    v = merge(v, other, mul1, mul2);
  }
  __syncthreads();  // smem may be reused right after
  return v;
}

__device__ float block_sum(float v, float* smem) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : 0.0f;
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

struct Args {
  const float* student;
  const float* const* teachers;  // device array of K device pointers
  int K;
  const std::int32_t* labels;
  float* grad;
  std::int64_t V;
  float inv_t, temperature;
  float hs, as;      // scale * h, scale * a * T (scale = 1 / rows counted)
  float* row_terms;  // out: [N][2] = (CE, T^2 KL) per row, 0 for ignored rows
};

// Dynamic shared memory: 2 K floats, each teacher's max and log of its sum.
__global__ void distill_loss_kernel(Args a) {
  __shared__ Online smem[kWarp];
  __shared__ float fsmem[kWarp];
  extern __shared__ float teacher_stats[];
  const std::int64_t row = blockIdx.x;
  const int V = static_cast<int>(a.V);
  const float* z = a.student + row * a.V;
  float* g = a.grad ? a.grad + row * a.V : nullptr;
  const int y = a.labels[row];
  if (y < 0) {
    if (g)
      for (int j = threadIdx.x; j < V; j += blockDim.x) g[j] = 0.0f;
    if (threadIdx.x == 0) a.row_terms[2 * row] = a.row_terms[2 * row + 1] = 0.0f;
    return;
  }
  const bool shared = a.K == 0 || a.temperature == 1.0f;  // softmax(z / T) is softmax(z)

  // Pass 1: statistics. z[y] is read before the first barrier, i.e. before any write.
  const float zy = z[y];
  Online zs{-INFINITY, 0.0f, 0.0f};
  for (int j = threadIdx.x; j < V; j += blockDim.x) push(zs, z[j], 1.0f, a.inv_t, !shared);
  zs = block_merge(zs, 1.0f, a.inv_t, smem);
  for (int k = 0; k < a.K; ++k) {
    const float* t = a.teachers[k] + row * a.V;
    Online ts{-INFINITY, 0.0f, 0.0f};
    for (int j = threadIdx.x; j < V; j += blockDim.x) push(ts, t[j], a.inv_t, a.inv_t, false);
    ts = block_merge(ts, a.inv_t, a.inv_t, smem);  // st stays 0 (unused)
    if (threadIdx.x == 0) {
      teacher_stats[2 * k] = ts.m;
      teacher_stats[2 * k + 1] = logf(ts.s1);
    }
  }
  __syncthreads();
  const float log_s1 = logf(zs.s1), log_st = shared ? log_s1 : logf(zs.st);

  // Pass 2: one read of every logit, the loss terms and the gradient.
  const float inv_k = a.K > 0 ? 1.0f / static_cast<float>(a.K) : 0.0f;
  const float* t0 = a.K > 0 ? a.teachers[0] + row * a.V : nullptr;
  float kl = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float zj = z[j];
    const float lpt = (zj - zs.m) * a.inv_t - log_st;  // log softmax(z / T)_j
    const float pt = expf(lpt);
    const float p = shared ? pt : expf(zj - zs.m - log_s1);
    float q = 0.0f;
    if (a.K == 1) {
      const float lq = (t0[j] - teacher_stats[0]) * a.inv_t - teacher_stats[1];
      q = expf(lq);
      kl += q * (lq - lpt);
    } else if (a.K > 1) {
      for (int k = 0; k < a.K; ++k)
        q += expf((a.teachers[k][row * a.V + j] - teacher_stats[2 * k]) * a.inv_t -
                  teacher_stats[2 * k + 1]);
      q *= inv_k;
      if (q > 0.0f) kl += q * (logf(q) - lpt);
    }
    if (g) g[j] = a.hs * (p - (j == y ? 1.0f : 0.0f)) + (a.K > 0 ? a.as * (pt - q) : 0.0f);
  }
  kl = block_sum(kl, fsmem);
  if (threadIdx.x == 0) {
    a.row_terms[2 * row] = log_s1 - (zy - zs.m);
    a.row_terms[2 * row + 1] = a.K > 0 ? a.temperature * a.temperature * kl : 0.0f;
  }
}

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
  if (threadIdx.x == 0) {
    sums[0] = s[0][0];
    sums[1] = s[1][0];
  }
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

void check_args(const float* student, const float* const* teachers, int K,
                const std::int32_t* labels, std::int64_t N, std::int64_t V,
                const cpu::DistillLossParams& p) {
  if (N <= 0 || V <= 0 || N > INT32_MAX || V > INT32_MAX)
    throw std::invalid_argument("distill_loss (cuda): need 0 < N, V < 2^31, got N=" +
                                std::to_string(N) + " V=" + std::to_string(V));
  if (K < 0)
    throw std::invalid_argument("distill_loss (cuda): K must be >= 0, got " + std::to_string(K));
  if (!(p.temperature > 0) || !std::isfinite(p.temperature))
    throw std::invalid_argument("distill_loss (cuda): temperature must be finite and > 0, got " +
                                std::to_string(p.temperature));
  if (!student || !labels)
    throw std::invalid_argument("distill_loss (cuda): null student or labels");
  for (int k = 0; k < K; ++k)
    if (!teachers || !teachers[k])
      throw std::invalid_argument("distill_loss (cuda): teacher " + std::to_string(k) + " is null");
}

}  // namespace

cpu::DistillLossResult distill_loss(const float* student, const float* const* teachers, int K,
                                    const std::int32_t* labels, float* grad, std::int64_t N,
                                    std::int64_t V, const cpu::DistillLossParams& p, int device,
                                    void* stream_ptr) {
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
  auto* ptrs = reinterpret_cast<const float**>(base + off_ptrs);
  auto* terms = reinterpret_cast<float*>(base + off_terms);

  const unsigned long long init[2] = {0, static_cast<unsigned long long>(N)};
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(header, init, sizeof init, cudaMemcpyHostToDevice, stream));
  if (K > 0)
    CODISTILL_CUDA_CHECK(cudaMemcpyAsync(ptrs, teachers, sizeof(float*) * K, cudaMemcpyHostToDevice,
                                         stream));
  const int check_blocks = static_cast<int>(std::min<std::int64_t>((N + 255) / 256, 1024));
  check_labels_kernel<<<check_blocks, 256, 0, stream>>>(labels, N, V, header);
  CODISTILL_CUDA_CHECK(cudaGetLastError());
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
    if (grad) CODISTILL_CUDA_CHECK(cudaMemsetAsync(grad, 0, sizeof(float) * N * V, stream));
    CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
    return cpu::DistillLossResult{};
  }

  const double scale = 1.0 / static_cast<double>(rows);
  Args args{student, ptrs, K, labels, grad, V,
            static_cast<float>(1.0 / p.temperature), static_cast<float>(p.temperature),
            static_cast<float>(scale * p.hard_weight),
            static_cast<float>(scale * p.weight * p.temperature), terms};
  const int threads = V >= 8192 ? 512 : 256;  // big rows: more loads in flight per row
  distill_loss_kernel<<<static_cast<unsigned>(N), threads, 2 * sizeof(float) * K, stream>>>(args);
  CODISTILL_CUDA_CHECK(cudaGetLastError());
  sum_rows_kernel<<<1, kReduceThreads, 0, stream>>>(terms, N, sums);
  CODISTILL_CUDA_CHECK(cudaGetLastError());
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

}  // namespace codistill::kernels::cuda
