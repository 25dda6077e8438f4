#pragma once
// Global average pooling on CUDA, float32 (semantics: kernels/cpu/image/avgpool.hpp; kernels in
// device/avgpool.cuh).
#include <cstdint>

#include "kernels/cuda/context.hpp"

namespace codistill::kernels::cuda {

void global_avgpool_forward(const float* x, float* y, std::int64_t rows, std::int64_t spatial, const Context& ctx);
void global_avgpool_backward(const float* dy, float* dx, std::int64_t rows, std::int64_t spatial,
                             const Context& ctx);

}  // namespace codistill::kernels::cuda
