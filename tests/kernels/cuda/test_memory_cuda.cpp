#include <catch2/catch.hpp>

#include <iostream>
#include <vector>

#include "kernels/cuda/memory.hpp"
#include "kernels/tensor.hpp"

using namespace codistill::kernels;

TEST_CASE("Tensor device memory: host -> device -> device -> host round trip", "[cuda]") {
  if (cuda::device_count() == 0) {
    std::cout << "skipped: no CUDA device" << std::endl;
    SUCCEED("no CUDA device");
    return;
  }
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  Tensor host = Tensor::from_vector({10, 100}, values);
  Tensor dev = host.to(Device::cuda(0));
  CHECK(dev.device().is_cuda());
  Tensor dev2 = dev.clone();
  dev.zero();  // must not touch the clone
  Tensor back = dev2.to(Device::cpu());
  for (std::size_t i = 0; i < values.size(); ++i) REQUIRE(back.data<float>()[i] == values[i]);
  Tensor zeros = dev.to(Device::cpu());
  CHECK(zeros.data<float>()[999] == 0.0f);
}

TEST_CASE("CPU-only builds say why device memory is unavailable", "[cuda]") {
  if (cuda::built_with_cuda()) {
    CHECK_NOTHROW(cuda::device_count());
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_THROWS_WITH(Tensor::empty({4}, DType::f32, Device::cuda(0)), Catch::Contains("no CUDA backend"));
}
