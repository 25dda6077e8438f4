#pragma once
// The fused loss's launches one by one, for the fused linear + distillation head
// (distill_head.cu), which runs the loss on chunks of a batch: the label check once over
// the whole batch, the loss kernel once per chunk (reading the batch's row count from the
// header for the gradient scale), the row sums once at the end. distill_loss.cu queues the
// same three for a whole batch. Internal to kernels/cuda/ (.cu files only).
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda::detail {

// header (device, 2 x u64) must hold {0, N} (queued before): afterwards header[0] = rows
// counted, header[1] = the first row with a label outside [-1, V), N when there is none.
void queue_check_labels(const std::int32_t* labels, std::int64_t N, std::int64_t V,
                        unsigned long long* header, const Context& ctx);

// The loss and its gradient on rows [0, N) of student/grad/labels (grad may alias student or
// be null); teachers_dev: a device array of K device pointers, teachers_host the same
// pointers on the host (their alignment picks the vector loads). header as left by
// queue_check_labels over a batch of at least N rows (a bad label in it anywhere with
// header[1] < N writes nothing); the gradient is scaled by 1 / header[0]. row_terms: device
// [N][2] out.
void queue_distill_rows(const float* student, const float* const* teachers_host,
                        const float* const* teachers_dev, int K, const std::int32_t* labels,
                        float* grad, std::int64_t N, std::int64_t V,
                        const DistillLossParams& p, const unsigned long long* header,
                        float* row_terms, const Context& ctx);

// sums[0], sums[1] (device doubles) = the sums of row_terms' two columns over N rows.
void queue_sum_rows(const float* row_terms, std::int64_t N, double* sums, const Context& ctx);

}  // namespace codistill::kernels::cuda::detail
