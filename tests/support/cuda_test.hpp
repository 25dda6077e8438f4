#pragma once
// Helpers of the [cuda] tests of the library: the skip convention (DESIGN.md section 9:
// "skipped: no CUDA device", which CTest reports as skipped) and copies between host
// tensors and device tensors on a queue.
#include <catch2/catch.hpp>

#include <iostream>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "support/test_util.hpp"

namespace codistill::test {

inline kernels::Backend& cuda() { return kernels::backend_for(kernels::DeviceKind::cuda); }

// [cuda] test cases begin with: if (skip_without_cuda()) return;
inline bool skip_without_cuda() {
  if (cuda().device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("no CUDA device");
  return true;
}

// A device copy of a host tensor, queued on q (ordered with the work there).
inline kernels::Tensor on_device(const kernels::Tensor& host, kernels::Queue& q) {
  kernels::Tensor d = kernels::Tensor::empty(host.shape(), host.dtype(), q.device());
  q.copy(d, host);
  return d;
}

// The values of a float32 tensor on any device, once q is done with it.
inline std::vector<float> host_values(const kernels::Tensor& t, kernels::Queue& q) {
  q.synchronize();
  const kernels::Tensor h = t.to(kernels::Device::cpu());
  return {h.data<float>(), h.data<float>() + h.numel()};
}

// Each parameter gradient of a model on a CUDA queue against its CPU twin's (built alike:
// the same parameters in the same order), within tol (rel_error).
template <class M>
void check_grads_close(M& cpu, M& gpu, kernels::Queue& q, double tol) {
  auto pc = cpu.params(), pg = gpu.params();
  REQUIRE(pc.size() == pg.size());
  for (std::size_t k = 0; k < pc.size(); ++k) {
    INFO("grad of " << pc[k].path);
    CHECK(rel_error(host_values(*pg[k].grad, q), host_values(*pc[k].grad, q)) < tol);
  }
}

}  // namespace codistill::test
