#include <catch2/catch.hpp>

#include <iostream>
#include <vector>

#include "kernels/backend.hpp"
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
  // The backend's op entry points (generated from kernels/op_list.def) say the same; an
  // optional one refuses as supports() does.
  Backend& b = backend_for(DeviceKind::cuda);
  CHECK(b.device_count() == 0);
  for (Op op : kAllOps) CHECK_FALSE(b.supports(op, DType::f32));
  Tensor x = Tensor::zeros({4}, DType::f32), y = Tensor::zeros({4}, DType::f32);
  Queue& q = default_cpu_queue();
  CHECK_THROWS_WITH(b.activation_forward(x, y, Activation::relu, q), Catch::Contains("no CUDA backend"));
  CHECK_THROWS_AS(b.add(x, x, y, q), std::runtime_error);
  CHECK_THROWS_WITH(b.add_activation(x, x, y, Activation::relu, q),
                    Catch::Contains("add+activation is not supported for float32 on cuda"));
}
