// Launchers of the embedding kernels (embedding.hpp; the gather from a float32 or a bf16
// table). Per call, on the queue's stream: the verdict word set to "no bad row", the id
// check, the gather (scatter) kernel, which reads the verdict on the device and writes
// nothing when an id is bad, one download of the verdict and one host synchronization; a bad
// id then throws, naming the first bad row and its id.
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/embedding.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/resources.cuh"
#include "kernels/cuda/sequence/embedding.hpp"

namespace codistill::kernels::cuda {
namespace {

// The verdict word in the queue's stream scratch, reset and then written by the id check.
unsigned long long* queue_check_ids(const std::int32_t* ids, const EmbeddingShape& s, const Context& ctx) {
  auto* verdict = static_cast<unsigned long long*>(detail::stream_workspace(ctx, sizeof(unsigned long long)));
  const cudaStream_t stream = detail::stream_of(ctx);
  CODISTILL_CUDA_CHECK(cudaMemsetAsync(verdict, 0xff, sizeof *verdict, stream));  // kNoBadRow
  const auto check = shapes::embedding_check(s.rows);
  device::embedding_check_ids_kernel<<<check.grid.x, check.block.x, 0, stream>>>(ids, s.rows, s.vocab, verdict);
  CODISTILL_CUDA_LAUNCH_CHECK();
  return verdict;
}

// Downloads the verdict (one synchronization) and throws for a bad id.
void finish(const std::int32_t* ids, const unsigned long long* verdict, const EmbeddingShape& s, const char* op,
            const Context& ctx) {
  const cudaStream_t stream = detail::stream_of(ctx);
  // The pinned scratch's host side is idle between ops: each op using it ends synchronized.
  auto* host = static_cast<unsigned long long*>(resources_of(ctx, op).pinned_scratch(sizeof(unsigned long long)));
  CODISTILL_CUDA_CHECK(cudaMemcpyAsync(host, verdict, sizeof *host, cudaMemcpyDeviceToHost, stream));
  CODISTILL_CUDA_CHECK(cudaStreamSynchronize(stream));
  const unsigned long long row = *host;
  if (row == device::kNoBadRow) return;
  std::int32_t id = 0;
  CODISTILL_CUDA_CHECK(cudaMemcpy(&id, ids + row, sizeof id, cudaMemcpyDeviceToHost));
  throw std::out_of_range(std::string(op) + " (cuda): row " + std::to_string(row) + " has id " + std::to_string(id) +
                          ", outside [0, " + std::to_string(s.vocab) + ")");
}

// The check, the gather from a float32 or bf16 table, the verdict.
template <class T>
void gather(const std::int32_t* ids, const T* table, float* y, const EmbeddingShape& s, const char* op,
            const Context& ctx) {
  s.validate();
  if (s.rows == 0) return;
  detail::use_device(ctx);
  const unsigned long long* verdict = queue_check_ids(ids, s, ctx);
  const auto shape = shapes::elementwise(s.rows * s.dim);
  device::embedding_gather_kernel<T>
      <<<shape.grid.x, shape.block.x, 0, detail::stream_of(ctx)>>>(ids, table, y, s.rows, s.dim, verdict);
  CODISTILL_CUDA_LAUNCH_CHECK();
  finish(ids, verdict, s, op, ctx);
}

}  // namespace

void embedding_forward(const std::int32_t* ids, const float* table, float* y, const EmbeddingShape& s,
                       const Context& ctx) {
  gather(ids, table, y, s, "embedding", ctx);
}

void embedding_forward(const std::int32_t* ids, const std::uint16_t* table_bf16, float* y, const EmbeddingShape& s,
                       const Context& ctx) {
  gather(ids, table_bf16, y, s, "embedding (bf16 table)", ctx);
}

void embedding_backward(const std::int32_t* ids, const float* dy, float* dtable, const EmbeddingShape& s,
                        const Context& ctx) {
  s.validate();
  if (s.rows == 0) return;
  detail::use_device(ctx);
  const unsigned long long* verdict = queue_check_ids(ids, s, ctx);
  const auto shape = shapes::embedding_scatter(s.vocab, s.dim);
  const dim3 grid(shape.pass.grid.x, shape.pass.grid.y), block(shape.pass.block.x, shape.pass.block.y);
  device::embedding_scatter_kernel<<<grid, block, 0, detail::stream_of(ctx)>>>(ids, dy, dtable, s.rows, s.vocab,
                                                                                s.dim, shape.band_width, verdict);
  CODISTILL_CUDA_LAUNCH_CHECK();
  finish(ids, verdict, s, "embedding backward", ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                                    kernels::Queue& q) {
  const char* op = "embedding";
  // A table held as bf16 (a forward-only model's) gives float32 rows, as on the CPU.
  const bool bf16_table = table.dtype() == DType::bf16;
  CudaQueue& cq = bf16_table ? enter(q, Op::embedding_bf16_table, y.dtype(), op)
                              : enter(q, Op::embedding, table.dtype(), op);
  s.validate();
  ops::expect(cq.device(), op,
              {{ids, s.rows, "ids", DType::i32},
               {table, s.vocab * s.dim, "table", bf16_table ? DType::bf16 : DType::f32},
               {y, s.rows * s.dim, "y"}});
  const auto* id = static_cast<const std::int32_t*>(ids.raw());
  if (bf16_table)
    cuda::embedding_forward(id, static_cast<const std::uint16_t*>(table.raw()), f32(y), s, cq.context());
  else
    cuda::embedding_forward(id, f32(table), f32(y), s, cq.context());
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                                     kernels::Queue& q) {
  const char* op = "embedding backward";
  CudaQueue& cq = enter(q, Op::embedding, dy.dtype(), op);
  s.validate();
  ops::expect(cq.device(), op,
              {{ids, s.rows, "ids", DType::i32}, {dy, s.rows * s.dim, "dy"}, {dtable, s.vocab * s.dim, "dtable"}});
  cuda::embedding_backward(static_cast<const std::int32_t*>(ids.raw()), f32(dy), f32(dtable), s, cq.context());
}

}  // namespace codistill::kernels::cuda
