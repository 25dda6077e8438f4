// SGD and AdamW updates over every parameter in one launch (optimizer.hpp).
//
// The parameters are described by a table of slices in device memory, each slice cut into
// chunks of kChunk elements; block b updates chunk b, finding its slice by a binary search
// over the slices' first chunks. A model's slice list is the same every step, so its table
// is uploaded once and cached by the queue (keyed by the list's contents; the queue's
// OptimizerTables, resources.cuh); only a new list is uploaded. A single slice (one flat
// arena, as the backend passes) is a kernel argument instead.
//
// The kernels (the CPU loops' arithmetic, operation for operation) are in
// device/optimizer.cuh with their launch shape. The backend's entry points at the end.
#include <cuda_runtime.h>

#include <cstring>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/optimizer.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/optimizer.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
// Named, not anonymous: a queue's OptimizerTables (declared in resources.cuh) holds Tables.
namespace optimizer_detail {

using device::AdamWOp;
using device::DevSlice;
using device::SgdOp;
using device::step_kernel;
using device::step_one_kernel;
constexpr std::int64_t kChunk = shapes::kOptimizerChunk;
constexpr std::size_t kCachedTables = 16;  // per queue

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
    const auto shape = shapes::optimizer(chunks);
    step_one_kernel<Op><<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(host.front(),
                                                                                   op);
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
  const auto shape = shapes::optimizer(t.chunks);
  step_kernel<Op><<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(
      t.device, static_cast<int>(t.host.size()), op);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

}  // namespace optimizer_detail

using device::AdamWOp;
using device::SgdOp;
using optimizer_detail::launch;

void sgd_step(const std::vector<ParamSlice>& params, const SgdScalars& s, const Context& ctx) {
  launch(params, s.momentum != 0.0f, false, SgdOp{s}, "sgd_step", ctx);
}

void adamw_step(const std::vector<ParamSlice>& params, const AdamWScalars& s, const Context& ctx) {
  launch(params, true, true, AdamWOp{s}, "adamw_step", ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

namespace {
// Out of place (UpdateSource), the state is first copied into the written tensors on the
// queue and then updated in place: one device copy more than the CPU loops, which read one
// array and write the other. No caller updates a device arena out of place today (its
// checkpoints copy the state to the host at the step, persist/worker_state.hpp); the copy
// keeps the kernels, and their SIMT tests, as they are.
static void copy_update_source(Tensor& value, Tensor* m, Tensor* v, const UpdateSource& from, kernels::Queue& q) {
  if (from.value) q.copy(value, *from.value);
  if (from.m) q.copy(*m, *from.m);
  if (from.v) q.copy(*v, *from.v);
}
}  // namespace

// One launch of per-chunk partial sums into scratch, one download, the partials added on the
// host in chunk order: the same bits run to run.
double CudaBackend::sum_squares(const Tensor& x, kernels::Queue& q) {
  const std::int64_t n = x.numel();
  CudaQueue& cq = enter(q, Op::sum_squares, x.dtype(), "sum_squares", {{x, n, "x"}});
  if (n == 0) return 0;
  const Context& ctx = cq.context();
  auto& res = resources_of(ctx, "sum_squares");
  detail::use_device(ctx);
  const cudaStream_t stream = detail::stream_of(ctx);
  const auto shape = shapes::sum_squares(n);
  const std::size_t bytes = shape.grid.x * sizeof(double);
  auto* partials = static_cast<double*>(res.scratch(bytes));
  device::sum_squares_kernel<<<shape.grid.x, shape.block.x, shape.smem, stream>>>(f32(x), n, partials);
  CODISTILL_CUDA_LAUNCH_CHECK();
  auto* host = static_cast<double*>(res.pinned_scratch(bytes));
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(host, partials, bytes, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  double s = 0;
  for (unsigned b = 0; b < shape.grid.x; ++b) s += host[b];
  return s;
}

void CudaBackend::sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum,
                             const kernels::SgdScalars& s, const UpdateSource& from, kernels::Queue& q) {
  const char* op = "sgd_update";
  const std::int64_t n = value.numel();
  CudaQueue& cq = enter(q, Op::sgd_update, value.dtype(), op,
                        {{value, n, "value"}, {grad, n, "grad"}, {momentum, n, "momentum"}});
  check_update_source(from, value, momentum, nullptr, op);
  copy_update_source(value, momentum, nullptr, from, q);
  // The casts of the CPU path's float instantiation (codistill/optim/sgd.cpp).
  cuda::SgdScalars sc;
  sc.lr = static_cast<float>(s.lr);
  sc.weight_decay = static_cast<float>(s.weight_decay);
  sc.momentum = static_cast<float>(s.momentum);
  sc.nesterov = s.nesterov;
  sc.grad_scale = static_cast<float>(s.grad_scale);
  ParamSlice slice;
  slice.value = f32(value);
  slice.grad = f32(grad);
  slice.slot0 = f32(momentum);
  slice.n = n;
  sgd_step({slice}, sc, cq.context());
}

void CudaBackend::adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v,
                               const kernels::AdamWScalars& s, const UpdateSource& from, kernels::Queue& q) {
  const char* op = "adamw_update";
  const std::int64_t n = value.numel();
  CudaQueue& cq = enter(q, Op::adamw_update, value.dtype(), op,
                        {{value, n, "value"}, {grad, n, "grad"}, {m, n, "m"}, {v, n, "v"}});
  check_update_source(from, value, &m, &v, op);
  copy_update_source(value, &m, &v, from, q);
  // The casts of the CPU path's float instantiation (codistill/optim/adamw.cpp).
  cuda::AdamWScalars sc;
  sc.decay = static_cast<float>(s.decay);
  sc.beta1 = static_cast<float>(s.beta1);
  sc.beta2 = static_cast<float>(s.beta2);
  sc.step_size = static_cast<float>(s.step_size);
  sc.inv_sqrt_bc2 = static_cast<float>(s.inv_sqrt_bc2);
  sc.eps = static_cast<float>(s.eps);
  sc.grad_scale = static_cast<float>(s.grad_scale);
  ParamSlice slice;
  slice.value = f32(value);
  slice.grad = f32(grad);
  slice.slot0 = f32(m);
  slice.slot1 = f32(v);
  slice.n = n;
  adamw_step({slice}, sc, cq.context());
}

}  // namespace codistill::kernels::cuda
