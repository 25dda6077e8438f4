#pragma once
// The fused distillation-loss kernels (launched by distill_loss.cu; shapes:
// launch_shapes.hpp; run by the tests under the SIMT executor):
//   check_labels_kernel  counts the rows with a label and finds the first bad label
//   distill_loss_kernel  the loss and its gradient, one kernel template over the logit type
//                        (float or __nv_bfloat16; float32 math inside) and the launch shape:
//                        a group of threads owns a row, a warp for small V (several rows per
//                        block) or the whole block for large V
//   sum_rows_kernel      the per-row terms summed in double in a fixed order
// distill_loss_kernel:
//   pass 1  online softmax statistics (running max and rescaled sums) of the student and of
//           each teacher, merged across the group with warp shuffles (and shared memory)
//   pass 2  per element: p, p_T, q, the KL term and the gradient, written where z was read
//           (grad may alias the student: every element is read before it is written)
// It reads check_labels_kernel's verdict first: with a bad label it writes nothing (the
// host throws after its one synchronization), and the gradient scale (1 / rows counted)
// comes from the device, so the host never waits between the two kernels.
// For large V the kernel is bound by memory traffic, so: 128-bit loads (64-bit for bf16)
// when V is a multiple of 4 and the rows aligned, scalar loads otherwise; several loads in
// flight per thread; pass 1 loads left in L2 for pass 2, whose loads and the gradient
// stores are marked streaming (evict first). Exponentials are exp2 of log2e-scaled
// differences (one MUFU op each); the KL is summed in log2 units and scaled by ln 2 once.
// Masked logits (-inf) contribute exp2(-inf) = 0 and no KL term (0 log 0 = 0).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/device/reduce.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

// ---- element access: kVec (1 or 4) consecutive elements as float --------------------------

template <class T, int kVec, bool kLast = false>
__device__ __forceinline__ void load(const T* p, float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    if constexpr (std::is_same_v<T, float>) x[0] = kLast ? __ldcs(p) : *p;
    else x[0] = __bfloat162float(*p);
  } else if constexpr (std::is_same_v<T, float>) {
    const auto* q = reinterpret_cast<const float4*>(p);
    const float4 v = kLast ? __ldcs(q) : *q;
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {  // 4 bf16 = 8 bytes; a bf16 is the high half of a float's bits
    const auto* q = reinterpret_cast<const uint2*>(p);
    const uint2 v = kLast ? __ldcs(q) : *q;
    x[0] = __uint_as_float(v.x << 16), x[1] = __uint_as_float(v.x & 0xffff0000u);
    x[2] = __uint_as_float(v.y << 16), x[3] = __uint_as_float(v.y & 0xffff0000u);
  }
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {  // round to nearest even
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &v, sizeof u);
  return u;
}

template <class T, int kVec>
__device__ __forceinline__ void store(T* p, const float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    if constexpr (std::is_same_v<T, float>) __stcs(p, x[0]);
    else *p = __float2bfloat16_rn(x[0]);
  } else if constexpr (std::is_same_v<T, float>) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(x[0], x[1], x[2], x[3]));
  } else {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3])));
  }
}

// ---- online softmax statistics ----------------------------------------------------------

// m = max x; s1 = sum exp2((x - m) c1); st = sum exp2((x - m) c2) (student, T != 1 only).
struct Stat {
  float m, s1, st;
};

// Rounded explicitly (no FMA contraction), so merge(a, b) and merge(b, a) give the same
// bits and every lane of a butterfly ends with the same statistics.
template <bool kTwo>
__device__ __forceinline__ Stat merge(Stat a, Stat b, float c1, float c2) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty
  const float da = a.m - m, db = b.m - m;
  Stat r{m, __fadd_rn(__fmul_rn(a.s1, exp2f(da * c1)), __fmul_rn(b.s1, exp2f(db * c1))), 0.0f};
  if (kTwo) r.st = __fadd_rn(__fmul_rn(a.st, exp2f(da * c2)), __fmul_rn(b.st, exp2f(db * c2)));
  return r;
}

template <bool kTwo>
__device__ __forceinline__ Stat warp_merge(Stat v, float c1, float c2) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const Stat w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s1, o),
                 kTwo ? __shfl_xor_sync(0xffffffffu, v.st, o) : 0.0f};
    v = merge<kTwo>(v, w, c1, c2);
  }
  return v;
}

// Merge over the row's group (a warp, or the whole block through smem); all get the result.
template <int kGroup, bool kTwo>
__device__ __forceinline__ Stat group_merge(Stat v, float c1, float c2, Stat* smem) {
  v = warp_merge<kTwo>(v, c1, c2);
  if constexpr (kGroup > kWarp) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane == 0) smem[warp] = v;
    __syncthreads();  // every warp's slot written before any is read
    v = lane < kGroup / kWarp ? smem[lane] : Stat{-INFINITY, 0.0f, 0.0f};
    v = warp_merge<kTwo>(v, c1, c2);
    __syncthreads();  // smem is reused by the next merge
  }
  return v;
}

template <int kGroup>
__device__ __forceinline__ float group_sum(float v, float* smem) {
  if constexpr (kGroup > kWarp) return block_sum(v, smem);
  else return warp_sum(v);
}

template <int kGroup>
__device__ __forceinline__ void group_sync() {
  if constexpr (kGroup > kWarp) __syncthreads();
  else __syncwarp();
}

// This thread's part of the statistics of row x (V / kVec vectors, kU loads in flight).
template <class T, int kVec, int kGroup, bool kTwo>
__device__ __forceinline__ Stat partial_stats(const T* x, int V, float c1, float c2) {
  constexpr int kU = 4;
  const int nv = V / kVec, lane = threadIdx.x % kGroup;
  Stat s{-INFINITY, 0.0f, 0.0f};
  for (int base = lane; base < nv; base += kU * kGroup) {
    float v[kU][kVec];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (base + u * kGroup < nv) load<T, kVec>(x + (base + u * kGroup) * kVec, v[u]);
      else
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[u][e] = -INFINITY;
    }
    float cm = -INFINITY;  // the chunk's max: one rescale per chunk, not per new maximum
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int e = 0; e < kVec; ++e) cm = fmaxf(cm, v[u][e]);
    if (cm > s.m) {  // from -inf the old sums are 0 and stay 0
      const float d = s.m - cm;
      s.s1 *= exp2f(d * c1);
      if (kTwo) s.st *= exp2f(d * c2);
      s.m = cm;
    }
    if (s.m == -INFINITY) continue;  // nothing but masked (-inf) logits so far
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float d = v[u][e] - s.m;
        s.s1 += exp2f(d * c1);
        if (kTwo) s.st += exp2f(d * c2);
      }
  }
  return s;
}

// ---- the kernel -------------------------------------------------------------------------

template <class T>
struct Args {
  const T* student;
  const T* const* teachers;  // device array of K device pointers
  int K;
  const std::int32_t* labels;
  T* grad;
  int N, V;
  bool shared;       // softmax(z / T) is softmax(z): K == 0 or T == 1
  float c1, c2;      // log2e and log2e / T (c2 = c1 when shared)
  float t2;          // T^2
  double hard_weight, weight, temperature;
  // check_labels_kernel's verdict: [0] rows counted, [1] first row with a bad label (N if none)
  const unsigned long long* header;
  float* row_terms;  // out: [N][2] = (CE, T^2 KL) per row, 0 for ignored rows
};

// The gradient's scales: scale * h and scale * a * T, scale = 1 / rows counted (in double,
// rounded once to float).
template <class T>
__device__ __forceinline__ void grad_scales(const Args<T>& a, float& hs, float& as) {
  const unsigned long long rows = a.header[0];
  const double scale = rows ? 1.0 / static_cast<double>(rows) : 0.0;
  hs = static_cast<float>(scale * a.hard_weight);
  as = static_cast<float>(scale * a.weight * a.temperature);
}

// Dynamic shared memory: per row group, each teacher's max and log2 of its sum.
template <class T, int kThreads, int kGroup, int kVec>
__global__ void __launch_bounds__(kThreads) distill_loss_kernel(Args<T> a) {
  constexpr int kRows = kThreads / kGroup, kU = 2;
  __shared__ Stat smem[kWarp];
  __shared__ float fsmem[kWarp];
  if (a.header[1] < static_cast<unsigned long long>(a.N)) return;  // a bad label: write nothing
  float* dyn = dynamic_smem<float>();
  float hs, as;
  grad_scales(a, hs, as);
  const int group = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  float* tstat = dyn + 2 * a.K * group;
  const int V = a.V, nv = V / kVec, K = a.K;
  const float c1 = a.c1, c2 = a.c2;

  for (int row = blockIdx.x * kRows + group; row < a.N; row += gridDim.x * kRows) {
    const std::int64_t off = static_cast<std::int64_t>(row) * V;
    const T* z = a.student + off;
    T* g = a.grad ? a.grad + off : nullptr;
    const int y = a.labels[row];
    if (y < 0) {  // ignored: zero gradient, no terms
      if (g) {
        float zero[kVec] = {};
        for (int i = lane; i < nv; i += kGroup) store<T, kVec>(g + i * kVec, zero);
      }
      if (lane == 0) a.row_terms[2 * row] = a.row_terms[2 * row + 1] = 0.0f;
      continue;
    }

    // Pass 1: statistics. z[y] is read before the first group barrier, before any write.
    float zy[1];
    load<T, 1>(z + y, zy);
    Stat zs = a.shared ? partial_stats<T, kVec, kGroup, false>(z, V, c1, c1)
                       : partial_stats<T, kVec, kGroup, true>(z, V, c1, c2);
    zs = a.shared ? group_merge<kGroup, false>(zs, c1, c1, smem)
                  : group_merge<kGroup, true>(zs, c1, c2, smem);
    for (int k = 0; k < K; ++k) {
      const T* t = a.teachers[k] + off;
      Stat ts = partial_stats<T, kVec, kGroup, false>(t, V, c2, c2);
      ts = group_merge<kGroup, false>(ts, c2, c2, smem);
      if (lane == 0) tstat[2 * k] = ts.m, tstat[2 * k + 1] = log2f(ts.s1);
    }
    group_sync<kGroup>();
    const float l1 = log2f(zs.s1), lt = a.shared ? l1 : log2f(zs.st);

    // Pass 2: one read of every logit, the loss terms and the gradient.
    const float inv_k = K > 0 ? 1.0f / static_cast<float>(K) : 0.0f;
    float kl = 0.0f;  // in log2 units
    for (int base = lane; base < nv; base += kU * kGroup) {
      float zv[kU][kVec], tv[kU][kVec], q[kU][kVec];
#pragma unroll
      for (int u = 0; u < kU; ++u) {  // all loads first: several in flight
        const int i = base + u * kGroup;
        if (i < nv) load<T, kVec, true>(z + i * kVec, zv[u]);
        if (K == 1 && i < nv) load<T, kVec, true>(a.teachers[0] + off + i * kVec, tv[u]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) q[u][e] = 0.0f;
      }
      for (int k = 0; K > 1 && k < K; ++k) {  // q = mean of the teachers' softmax(t / T)
        const T* t = a.teachers[k] + off;
        const float tm = tstat[2 * k], tl = tstat[2 * k + 1];
#pragma unroll
        for (int u = 0; u < kU; ++u)
          if (base + u * kGroup < nv) load<T, kVec, true>(t + (base + u * kGroup) * kVec, tv[u]);
#pragma unroll
        for (int u = 0; u < kU; ++u)
#pragma unroll
          for (int e = 0; e < kVec; ++e) q[u][e] += exp2f((tv[u][e] - tm) * c2 - tl);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + u * kGroup;
        if (i >= nv) break;
        float gv[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float d = zv[u][e] - zs.m;
          const float lpt = d * c2 - lt;  // log2 softmax(z / T)_j
          const float pt = exp2f(lpt);
          const float p = a.shared ? pt : exp2f(d * c1 - l1);
          float qe = 0.0f;
          if (K == 1) {
            const float lq = (tv[u][e] - tstat[0]) * c2 - tstat[1];
            qe = exp2f(lq);
            if (qe > 0.0f) kl += qe * (lq - lpt);  // 0 * (-inf) would be NaN
          } else if (K > 1) {
            qe = q[u][e] * inv_k;
            if (qe > 0.0f) kl += qe * (__log2f(qe) - lpt);
          }
          const int j = i * kVec + e;
          gv[e] = hs * (p - (j == y ? 1.0f : 0.0f)) + (K > 0 ? as * (pt - qe) : 0.0f);
        }
        if (g) store<T, kVec>(g + i * kVec, gv);
      }
    }
    // group_sum is also the barrier before the next row rewrites tstat: every lane has read
    // this row's tstat before it gets there (its kl depends on what it read), and no lane
    // leaves before all have arrived (a block_sum's __syncthreads, a warp_sum's full-mask
    // shuffles). The group_sync that followed added nothing: no schedule showed its absence.
    kl = group_sum<kGroup>(kl, fsmem);
    if (lane == 0) {
      a.row_terms[2 * row] = logf(zs.s1) - (zy[0] - zs.m);
      a.row_terms[2 * row + 1] = K > 0 ? a.t2 * kl * kLn2 : 0.0f;
    }
  }
}

// header[0] += rows counted; header[1] = min(header[1], first row with a label outside
// [-1, V)). The host sets header = {0, N} first.
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
// One block of shapes::kReduceThreads threads.
__global__ void sum_rows_kernel(const float* row_terms, std::int64_t N, double* sums) {
  constexpr int kThreads = shapes::kReduceThreads;
  __shared__ double s[2][kThreads];
  double ce = 0, kl = 0;
  for (std::int64_t r = threadIdx.x; r < N; r += kThreads) {
    ce += row_terms[2 * r];
    kl += row_terms[2 * r + 1];
  }
  s[0][threadIdx.x] = ce;
  s[1][threadIdx.x] = kl;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      s[0][threadIdx.x] += s[0][threadIdx.x + half];
      s[1][threadIdx.x] += s[1][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[0] = s[0][0], sums[1] = s[1][0];
}

// The instance of distill_loss_kernel for a launch variant (shapes::distill_loss_variant).
template <class T>
using DistillKernel = void (*)(Args<T>);
template <class T>
DistillKernel<T> distill_kernel_for(const shapes::DistillVariant& v) {
  const bool vec = v.vec == 4;
  if (v.group == kWarp && v.threads == 256)
    return vec ? distill_loss_kernel<T, 256, kWarp, 4> : distill_loss_kernel<T, 256, kWarp, 1>;
  if (v.group == 256 && v.threads == 256)
    return vec ? distill_loss_kernel<T, 256, 256, 4> : distill_loss_kernel<T, 256, 256, 1>;
  if (v.group == 512 && v.threads == 512)
    return vec ? distill_loss_kernel<T, 512, 512, 4> : distill_loss_kernel<T, 512, 512, 1>;
  if (v.group == 1024 && v.threads == 1024)
    return vec ? distill_loss_kernel<T, 1024, 1024, 4> : distill_loss_kernel<T, 1024, 1024, 1>;
  return nullptr;  // not a variant distill_loss_variant chooses
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
