#pragma once
// The skip convention of the [cuda] tests of kernels/cuda internals (the allocator, device
// memory). The ops are tested through the Backend interface by tests/kernels/test_backend_ops.cpp.
// No CUDA header here: these tests build (and skip) in CPU-only builds.
#include <catch2/catch.hpp>

#include <iostream>

#include "kernels/cuda/memory.hpp"

namespace codistill::test {

namespace cuda = codistill::kernels::cuda;

// True (after printing the line CTest reads as "skipped") when there is no CUDA device.
inline bool no_cuda_device() {
  if (cuda::device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("skipped: no CUDA device");
  return true;
}

}  // namespace codistill::test
