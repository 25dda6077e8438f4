#pragma once
// Turns CUDA errors into exceptions that carry file, line and CUDA's own message.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace codistill::kernels::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file,
                                          int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                           " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace codistill::kernels::cuda

#define CODISTILL_CUDA_CHECK(expr)                                                        \
  do {                                                                                    \
    cudaError_t codistill_err_ = (expr);                                                  \
    if (codistill_err_ != cudaSuccess)                                                    \
      ::codistill::kernels::cuda::throw_cuda_error(codistill_err_, #expr, __FILE__, __LINE__); \
  } while (0)
