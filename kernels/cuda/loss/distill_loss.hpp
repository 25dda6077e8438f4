#pragma once
// The fused distillation loss of DESIGN.md section 6 on a CUDA device, forward and
// backward in one kernel launch: the semantics of kernels/cpu/loss/distill_loss.hpp (which the
// tests use as its reference), on float32 logits with float32 accumulation inside a row.
// No CUDA type appears here: device memory is passed as plain pointers, the stream and its
// resources in a Context made by a queue (kernels/cuda/context.hpp): the loss keeps its
// scratch (device and pinned host) there, allocated once per queue, not per call.
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

// student, grad: device [N, V]; teachers: a host array of K device pointers to [N, V];
// labels: device [N]. grad may alias student (in place) or be null (forward only).
// Synchronizes the stream once: the result is on the host when this returns.
// Throws std::out_of_range for a label outside [-1, V) (naming the row and the label,
// before anything is written), std::invalid_argument for bad sizes or temperature, and
// std::runtime_error for CUDA failures or in a build without CUDA ("built without CUDA").
DistillLossResult distill_loss(const float* student, const float* const* teachers, int K,
                               const std::int32_t* labels, float* grad, std::int64_t N,
                               std::int64_t V, const DistillLossParams& p, const Context& ctx);

// The same on bfloat16 logits (raw bf16 bits, as kernels::DType::bf16 stores them), read
// and converted to float32 in registers; every sum is float32 (the row totals double).
// grad (bf16, may alias student, may be null) is rounded to nearest even once at the end.
DistillLossResult distill_loss_bf16(const std::uint16_t* student,
                                    const std::uint16_t* const* teachers, int K,
                                    const std::int32_t* labels, std::uint16_t* grad,
                                    std::int64_t N, std::int64_t V, const DistillLossParams& p,
                                    const Context& ctx);

}  // namespace codistill::kernels::cuda
