// SGD and AdamW updates over every parameter in one launch (optimizer.hpp).
//
// The parameters are described by a table of slices in device memory, each slice cut into
// chunks of kChunk elements; block b updates chunk b, finding its slice by a binary search
// over the slices' first chunks. A model's slice list is the same every step, so its table
// is uploaded once and cached by the queue (keyed by the list's contents; the queue's
// OptimizerTables, resources.cuh); only a new list is uploaded. A single slice (one flat
// arena, as the backend passes) is a kernel argument instead.
//
// The arithmetic is that of codistill/optim/sgd.cpp and adamw.cpp in float32, operation for
// operation, with explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...): nvcc would
// otherwise contract a*b+c into one FMA, which rounds differently from the CPU loop.
#include <cuda_runtime.h>

#include <cstring>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optimizer.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
// Named, not anonymous: a queue's OptimizerTables (declared in resources.cuh) holds Tables.
namespace optimizer_detail {

constexpr std::int64_t kChunk = 4096;  // elements per block: 16 per thread
constexpr int kThreads = 256;
constexpr std::size_t kCachedTables = 16;  // per queue

struct DevSlice {
  float* value;
  const float* grad;
  float* slot0;
  float* slot1;
  std::int64_t n;
  std::int64_t first_chunk;
  int vec4;  // every pointer 16-byte aligned: float4 loads and stores
  int pad;
};

bool operator==(const DevSlice& a, const DevSlice& b) {
  return std::memcmp(&a, &b, sizeof(DevSlice)) == 0;
}

// ---- the element updates ---------------------------------------------------------------

struct SgdOp {
  SgdScalars s;
  // p -= lr * (g + wd * p)   or, with momentum,
  // d = g + wd * p;  b = mu * b + d;  p -= lr * (nesterov ? d + mu * b : b)
  __device__ __forceinline__ void operator()(float& p, float g, float& b, float&) const {
    const float d = __fadd_rn(g, __fmul_rn(s.weight_decay, p));
    if (s.momentum == 0.0f) {
      p = __fsub_rn(p, __fmul_rn(s.lr, d));
      return;
    }
    const float nb = __fadd_rn(__fmul_rn(s.momentum, b), d);
    b = nb;
    const float step = s.nesterov ? __fadd_rn(d, __fmul_rn(s.momentum, nb)) : nb;
    p = __fsub_rn(p, __fmul_rn(s.lr, step));
  }
};

struct AdamWOp {
  AdamWScalars s;
  // m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
  // p = p decay - step_size m / (sqrt(v) inv_sqrt_bc2 + eps)
  __device__ __forceinline__ void operator()(float& p, float g, float& m, float& v) const {
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(__fsub_rn(1.0f, s.beta1), g));
    const float vi = __fadd_rn(__fmul_rn(s.beta2, v),
                               __fmul_rn(__fmul_rn(__fsub_rn(1.0f, s.beta2), g), g));
    m = mi;
    v = vi;
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), s.inv_sqrt_bc2), s.eps);
    p = __fsub_rn(__fmul_rn(p, s.decay), __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
  }
};

// Slots a step does not use are null; they are read and written through a dummy.
template <class Op>
__device__ __forceinline__ void update_one(const Op& op, const DevSlice& sl, std::int64_t i) {
  float p = sl.value[i];
  float s0 = sl.slot0 ? sl.slot0[i] : 0.0f, s1 = sl.slot1 ? sl.slot1[i] : 0.0f;
  op(p, sl.grad[i], s0, s1);
  sl.value[i] = p;
  if (sl.slot0) sl.slot0[i] = s0;
  if (sl.slot1) sl.slot1[i] = s1;
}

// The block's chunk of slice sl (whose chunks start at sl.first_chunk).
template <class Op>
__device__ __forceinline__ void update_chunk(const Op& op, const DevSlice& sl,
                                             std::int64_t chunk) {
  const std::int64_t begin = (chunk - sl.first_chunk) * kChunk;
  const std::int64_t end = begin + kChunk < sl.n ? begin + kChunk : sl.n;
  std::int64_t i = begin + threadIdx.x;
  if (sl.vec4) {
    // begin is a multiple of 4 (kChunk is), so with aligned bases every float4 is aligned.
    const std::int64_t vec_end = begin + (end - begin) / 4 * 4;
    for (std::int64_t j = begin + 4 * threadIdx.x; j < vec_end; j += 4 * kThreads) {
      float4 p = *reinterpret_cast<const float4*>(sl.value + j);
      const float4 g = *reinterpret_cast<const float4*>(sl.grad + j);
      float4 a = sl.slot0 ? *reinterpret_cast<const float4*>(sl.slot0 + j) : float4{};
      float4 b = sl.slot1 ? *reinterpret_cast<const float4*>(sl.slot1 + j) : float4{};
      op(p.x, g.x, a.x, b.x);
      op(p.y, g.y, a.y, b.y);
      op(p.z, g.z, a.z, b.z);
      op(p.w, g.w, a.w, b.w);
      *reinterpret_cast<float4*>(sl.value + j) = p;
      if (sl.slot0) *reinterpret_cast<float4*>(sl.slot0 + j) = a;
      if (sl.slot1) *reinterpret_cast<float4*>(sl.slot1 + j) = b;
    }
    i = vec_end + threadIdx.x;  // the tail of the slice's last chunk
  }
  for (; i < end; i += kThreads) update_one(op, sl, i);
}

template <class Op>
__global__ void __launch_bounds__(kThreads)
    step_kernel(const DevSlice* __restrict__ table, int slices, Op op) {
  const std::int64_t chunk = blockIdx.x;
  int lo = 0, hi = slices - 1;  // the last slice whose first chunk is <= this one
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_chunk <= chunk) lo = mid;
    else hi = mid - 1;
  }
  const DevSlice sl = table[lo];
  update_chunk(op, sl, chunk);
}

// One slice (a flat parameter arena: the backend's case) comes by value: no table.
template <class Op>
__global__ void __launch_bounds__(kThreads) step_one_kernel(const DevSlice sl, Op op) {
  update_chunk(op, sl, blockIdx.x);
}

// ---- the cached slice tables -----------------------------------------------------------

struct Table {
  std::vector<DevSlice> host;
  DevSlice* device = nullptr;
  std::int64_t chunks = 0;
};

}  // namespace optimizer_detail

// A queue's slice tables, most recently used first (at most kCachedTables). Only kernels
// queued on the queue's stream read them.
struct OptimizerTables {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::list<optimizer_detail::Table> tables;
};

OptimizerTables* new_optimizer_tables(int device, cudaStream_t stream) {
  auto* t = new OptimizerTables();
  t->device = device;
  t->stream = stream;
  return t;
}

void OptimizerTablesDeleter::operator()(OptimizerTables* p) const noexcept {
  // The owner (StreamResources) synchronized the stream first: no kernel reads a table.
  for (auto& t : p->tables) cached_free(t.device, p->device);
  delete p;
}

namespace optimizer_detail {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The slices with elements, laid out in chunks; checks that each has what the step needs.
std::vector<DevSlice> build(const std::vector<ParamSlice>& params, bool slot0, bool slot1,
                            const char* op, std::int64_t& chunks) {
  std::vector<DevSlice> out;
  chunks = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const ParamSlice& p = params[k];
    if (p.n < 0)
      throw std::invalid_argument(std::string(op) + " (cuda): slice " + std::to_string(k) +
                                  " has negative size");
    if (p.n == 0) continue;
    if (!p.value || !p.grad || (slot0 && !p.slot0) || (slot1 && !p.slot1))
      throw std::invalid_argument(std::string(op) + " (cuda): slice " + std::to_string(k) +
                                  " lacks a value, gradient or state pointer");
    DevSlice d{p.value, p.grad, slot0 ? p.slot0 : nullptr, slot1 ? p.slot1 : nullptr,
               p.n,     chunks, 0, 0};
    d.vec4 = aligned16(d.value) && aligned16(d.grad) && aligned16(d.slot0) && aligned16(d.slot1);
    out.push_back(d);
    chunks += (p.n + kChunk - 1) / kChunk;
  }
  if (chunks > 0x7fffffff)
    throw std::invalid_argument(std::string(op) + " (cuda): too many parameters for one launch");
  return out;
}

template <class Op>
void launch(const std::vector<ParamSlice>& params, bool slot0, bool slot1, const Op& op,
            const char* name, const Context& ctx) {
  std::int64_t chunks = 0;
  std::vector<DevSlice> host = build(params, slot0, slot1, name, chunks);
  if (host.empty()) return;
  if (host.size() > 0x7fffffff)
    throw std::invalid_argument(std::string(name) + " (cuda): too many slices");
  if (host.size() == 1) {
    detail::use_device(ctx);
    step_one_kernel<Op><<<static_cast<unsigned>(chunks), kThreads, 0, detail::stream_of(ctx)>>>(
        host.front(), op);
    CODISTILL_CUDA_LAUNCH_CHECK();
    return;
  }
  auto& tables = resources_of(ctx, name).optimizer_tables().tables;
  detail::use_device(ctx);
  auto it = tables.begin();
  while (it != tables.end() && it->host != host) ++it;
  if (it != tables.end()) {
    tables.splice(tables.begin(), tables, it);  // most recently used first
  } else {
    if (tables.size() >= kCachedTables) {
      // A kernel queued earlier on this stream may still read the evicted table.
      CODISTILL_CUDA_CHECK(cudaStreamSynchronize(detail::stream_of(ctx)));
      cached_free(tables.back().device, ctx.device);
      tables.pop_back();
    }
    Table t;
    t.host = std::move(host);
    t.chunks = chunks;
    const std::size_t bytes = sizeof(DevSlice) * t.host.size();
    t.device = static_cast<DevSlice*>(cached_malloc(bytes, ctx.device));
    // Ordered before the kernel on the same stream. From pageable memory the call returns
    // once the bytes are staged, and the host copy lives in the cache anyway.
    const cudaError_t err = cudaMemcpyAsync(t.device, t.host.data(), bytes,
                                            cudaMemcpyHostToDevice, detail::stream_of(ctx));
    if (err != cudaSuccess) {
      cached_free(t.device, ctx.device);
      throw_cuda_error(err, "cudaMemcpyAsync(slice table)", __FILE__, __LINE__);
    }
    tables.push_front(std::move(t));
  }
  const Table& t = tables.front();
  step_kernel<Op><<<static_cast<unsigned>(t.chunks), kThreads, 0, detail::stream_of(ctx)>>>(
      t.device, static_cast<int>(t.host.size()), op);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace optimizer_detail

using optimizer_detail::AdamWOp;
using optimizer_detail::launch;
using optimizer_detail::SgdOp;

void sgd_step(const std::vector<ParamSlice>& params, const SgdScalars& s, const Context& ctx) {
  launch(params, s.momentum != 0.0f, false, SgdOp{s}, "sgd_step", ctx);
}

void adamw_step(const std::vector<ParamSlice>& params, const AdamWScalars& s, const Context& ctx) {
  launch(params, true, true, AdamWOp{s}, "adamw_step", ctx);
}

}  // namespace codistill::kernels::cuda
