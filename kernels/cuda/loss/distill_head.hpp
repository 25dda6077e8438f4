#pragma once
// The fused linear + distillation head on a CUDA device, float32: the semantics of
// kernels/cpu/loss/distill_head.hpp (the tests' reference), with cuBLAS GEMMs per chunk of rows
// (plans/distill_head_plan.hpp) and the fused loss kernel of distill_loss.cu on each chunk,
// writing the logits gradient in place. No CUDA type here: device memory as plain
// pointers, the stream and its resources in a Context made by a queue.
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

// Device pointers. hidden [N, H], weight [V, H], bias [V] or null, labels [N]; dhidden
// [N, H] (overwritten), dweight [V, H], dbias [V] (accumulated), each may be null.
struct HeadOperands {
  const float* hidden = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  std::int64_t N = 0, H = 0, V = 0;
  const std::int32_t* labels = nullptr;
  float* dhidden = nullptr;
  float* dweight = nullptr;
  float* dbias = nullptr;
};

// One teacher: hidden [N, dim], weight [V, dim], bias [V] or null (device pointers). A
// teacher whose weight is held as bf16 (Op::linear_distill_head_bf16_teachers) has
// weight_bf16 (its bits, read as stored) instead of weight; its logits are then bf16 products
// (hidden rounded, float32 accumulation), which DistillHeadParams::teacher_compute must say.
struct HeadTeacherOperands {
  const float* hidden = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  std::int64_t dim = 0;
  const std::uint16_t* weight_bf16 = nullptr;
};

// Synchronizes the stream twice: after the label check (a bad label throws
// std::out_of_range naming the row and the label, before anything is written) and at the
// end (the result is on the host). The chunk's logits, (K + 1) x chunk x V floats, come
// from the caching allocator for the call (plus 8 N bytes of per-row loss terms).
DistillLossResult linear_distill_head(const HeadOperands& a, const HeadTeacherOperands* teachers, int K,
                                      const DistillHeadParams& p, const Context& ctx);

}  // namespace codistill::kernels::cuda
