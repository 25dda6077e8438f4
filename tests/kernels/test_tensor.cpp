#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/tensor.hpp"

using namespace codistill::kernels;

TEST_CASE("Tensor: shape, numel, typed access", "[tensor]") {
  Tensor t = Tensor::zeros({2, 3, 4});
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 96);
  CHECK(t.dim(-1) == 4);
  CHECK(t.dim(0) == 2);
  CHECK_THROWS_AS(t.dim(3), std::out_of_range);
  CHECK(t.dtype() == DType::f32);
  CHECK(t.device().is_cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(t.raw()) % 64 == 0);
  for (int i = 0; i < 24; ++i) CHECK(t.data<float>()[i] == 0.0f);
  CHECK_THROWS_WITH(t.data<double>(), Catch::Contains("float32") && Catch::Contains("float64"));
  CHECK_THROWS_AS(Tensor::empty({2, -1}), std::invalid_argument);
}

TEST_CASE("Tensor: reshape shares the buffer, clone does not", "[tensor]") {
  Tensor t = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor r = t.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  r.data<float>()[0] = 42;
  CHECK(t.data<float>()[0] == 42);
  Tensor c = t.clone();
  c.data<float>()[1] = -1;
  CHECK(t.data<float>()[1] == 2);
  CHECK_THROWS_WITH(t.reshape({4, 2}), Catch::Contains("[2, 3]") && Catch::Contains("[4, 2]"));
  CHECK_THROWS_AS(t.reshape({-1, -1}), std::invalid_argument);
}

TEST_CASE("Tensor: dtype conversion round trip and fill", "[tensor]") {
  Tensor t = Tensor::from_vector({3}, std::vector<float>{0.5f, -1.25f, 3.0f});
  Tensor d = t.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  CHECK(d.data<double>()[1] == -1.25);
  Tensor back = d.to(DType::f32);
  CHECK(back.data<float>()[2] == 3.0f);
  back.fill(7);
  CHECK(back.data<float>()[0] == 7.0f);
  CHECK_THROWS_AS(t.copy_from(d), std::invalid_argument);
  check_shape(t, {3}, "t");
  CHECK_THROWS_WITH(check_shape(t, {4}, "weights"), Catch::Contains("weights"));
}

TEST_CASE("Device::parse accepts cpu, cuda, cuda:K and names the valid spellings", "[tensor]") {
  CHECK(Device::parse("cpu").is_cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cuda:3").str() == "cuda:3");
  CHECK_THROWS_WITH(Device::parse("gpu"), Catch::Contains("valid: cpu, cuda, cuda:K"));
  CHECK_THROWS_AS(Device::parse("cuda:x"), std::invalid_argument);
  CHECK_THROWS_AS(Device::parse("cuda:-1"), std::invalid_argument);
}
