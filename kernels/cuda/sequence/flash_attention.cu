// Causal flash attention on CUDA (flash_attention.hpp): the launches of the tile kernels in
// device/flash_attention*.cuh with their shapes, on the queue's stream.
//   forward:  flash_forward_kernel (y, lse).
//   backward: flash_row_dot_kernel (D = rowsum(dy * y) into the stream's scratch), then
//             flash_backward_dkdv_kernel (the k and v columns of dqkv) and
//             flash_backward_dq_kernel (the q columns): every element of dqkv is written once.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/sequence/flash_attention.hpp"
#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/flash_attention_backward.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"
#include "kernels/cuda/resources.cuh"

namespace codistill::kernels::cuda {
namespace {

// The column variant of the tile kernels for s, or why there is none.
int columns_of(const AttentionShape& s) {
  const int cols = shapes::flash_cols(s.head_dim);
  if (cols == 0)
    throw std::invalid_argument("flash_attention (cuda): head_dim " + std::to_string(s.head_dim) +
                                " is over the kernels' " + std::to_string(shapes::kFlashMaxHeadDim) +
                                " (use model.attention: materialized)");
  // Heads and sequences are the grid's y and z (at most 65535 each).
  if (s.heads > 65535 || s.batch > 65535)
    throw std::invalid_argument("flash_attention (cuda): more than 65535 heads or sequences in one call");
  return cols;
}

// Above 48 KiB of dynamic shared memory a kernel must opt in (a per-function attribute, so
// setting it on every launch is cheap and keeps no state here).
template <class Kernel, class... Args>
void launch(Kernel kernel, const shapes::Launch& l, const Context& ctx, Args... args) {
  if (l.smem > (48u << 10))
    CODISTILL_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem)));
  const dim3 grid(l.grid.x, l.grid.y, l.grid.z), block(l.block.x, l.block.y, l.block.z);
  kernel<<<grid, block, l.smem, detail::stream_of(ctx)>>>(args...);
  CODISTILL_CUDA_LAUNCH_CHECK();
}

template <int kCols>
void forward(const float* qkv, float* y, float* lse, const AttentionShape& s, const Context& ctx) {
  launch(device::flash_forward_kernel<kCols>, shapes::flash_forward(s.batch, s.seq, s.heads, kCols), ctx, qkv, y,
         lse, static_cast<int>(s.seq), static_cast<int>(s.heads), static_cast<int>(s.head_dim),
         static_cast<float>(s.scale()));
}

template <int kCols>
void backward(const float* qkv, const float* lse, const float* dy, const float* rowdot, float* dqkv,
              const AttentionShape& s, const Context& ctx) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads), hd = static_cast<int>(s.head_dim);
  const float scale = static_cast<float>(s.scale());
  launch(device::flash_backward_dkdv_kernel<kCols>, shapes::flash_backward_dkdv(s.batch, s.seq, s.heads, kCols),
         ctx, qkv, dy, lse, rowdot, dqkv, T, H, hd, scale);
  launch(device::flash_backward_dq_kernel<kCols>, shapes::flash_backward_dq(s.batch, s.seq, s.heads, kCols), ctx,
         qkv, dy, lse, rowdot, dqkv, T, H, hd, scale);
}

}  // namespace

void flash_attention_forward(const float* qkv, float* y, float* lse, const AttentionShape& s, const Context& ctx) {
  s.validate();
  const int cols = columns_of(s);
  if (s.batch == 0) return;
  detail::use_device(ctx);
  if (cols == 2) forward<2>(qkv, y, lse, s, ctx);
  else if (cols == 4) forward<4>(qkv, y, lse, s, ctx);
  else forward<8>(qkv, y, lse, s, ctx);
}

void flash_attention_backward(const float* qkv, const float* y, const float* lse, const float* dy, float* dqkv,
                              const AttentionShape& s, const Context& ctx) {
  s.validate();
  const int cols = columns_of(s);
  if (s.batch == 0) return;
  detail::use_device(ctx);
  const std::int64_t rows = s.batch * s.heads * s.seq;
  auto* rowdot = static_cast<float*>(
      resources_of(ctx, "flash_attention").scratch(static_cast<std::size_t>(rows) * sizeof(float)));
  launch(device::flash_row_dot_kernel, shapes::flash_row_dot(rows), ctx, dy, y, rowdot, rows,
         static_cast<int>(s.seq), static_cast<int>(s.heads), static_cast<int>(s.head_dim));
  if (cols == 2) backward<2>(qkv, lse, dy, rowdot, dqkv, s, ctx);
  else if (cols == 4) backward<4>(qkv, lse, dy, rowdot, dqkv, s, ctx);
  else backward<8>(qkv, lse, dy, rowdot, dqkv, s, ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;


void CudaBackend::flash_attention_forward(const Tensor& qkv, Tensor& y, Tensor& lse, const AttentionShape& s,
                                          kernels::Queue& q) {
  const char* op = "flash_attention";
  CudaQueue& cq = enter(q, Op::flash_attention, qkv.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model();
  ops::expect(cq.device(), op,
              {{qkv, s.rows() * 3 * D, "qkv"}, {y, s.rows() * D, "y"}, {lse, s.batch * s.heads * s.seq, "lse"}});
  cuda::flash_attention_forward(f32(qkv), f32(y), f32(lse), s, cq.context());
}

void CudaBackend::flash_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy,
                                           Tensor& dqkv, const AttentionShape& s, kernels::Queue& q) {
  const char* op = "flash_attention backward";
  CudaQueue& cq = enter(q, Op::flash_attention, dy.dtype(), op);
  s.validate();
  const std::int64_t D = s.d_model();
  ops::expect(cq.device(), op,
              {{qkv, s.rows() * 3 * D, "qkv"}, {y, s.rows() * D, "y"}, {lse, s.batch * s.heads * s.seq, "lse"},
               {dy, s.rows() * D, "dy"}, {dqkv, s.rows() * 3 * D, "dqkv"}});
  cuda::flash_attention_backward(f32(qkv), f32(y), f32(lse), f32(dy), f32(dqkv), s, cq.context());
}

}  // namespace codistill::kernels::cuda
