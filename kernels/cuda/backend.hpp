#pragma once
// The CUDA backend (kernels/cuda/backend.cu), or in a build without CUDA a stub that has
// no device and says why (kernels/cuda/no_cuda.cpp). No CUDA type here.
#include "kernels/backend.hpp"

namespace codistill::kernels {

Backend& cuda_backend();

}  // namespace codistill::kernels
