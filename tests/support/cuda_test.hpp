#pragma once
// Helpers of the [cuda] tests of the library: the skip convention (DESIGN.md section 9:
// "skipped: no CUDA device", which CTest reports as skipped) and stream-ordered copies
// between host vectors and device tensors.
#include <catch2/catch.hpp>

#include <iostream>
#include <vector>

#include "codistill/util/device_memory.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/memory.hpp"
#include "kernels/tensor.hpp"

namespace codistill::test {

// [cuda] test cases begin with: if (skip_without_cuda()) return;
inline bool skip_without_cuda() {
  if (kernels::cuda::device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("no CUDA device");
  return true;
}

// A device copy of a host tensor, queued on ctx's stream (ordered with the kernels there).
inline kernels::Tensor on_device(const kernels::Tensor& host, const kernels::cuda::Context& ctx) {
  kernels::Tensor d = kernels::Tensor::empty(host.shape(), host.dtype(), kernels::Device::cuda(ctx.device));
  copy_async(d, host, ctx);
  return d;
}

// The values of a float32 tensor on any device (CUDA: after ctx's stream is done).
inline std::vector<float> host_values(const kernels::Tensor& t, const kernels::cuda::Context& ctx) {
  kernels::Tensor h = t;
  if (t.device().is_cuda()) copy_to_host(t, h, ctx);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

}  // namespace codistill::test
