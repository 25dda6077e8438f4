// kernels::check_update_source (kernels/update_source.cpp): what an out-of-place optimizer
// update may read. A source that shares memory with anything the update writes would be read
// after being written; the checks run before any backend touches memory.
#include <catch2/catch.hpp>

#include "kernels/backend.hpp"

using namespace codistill::kernels;

TEST_CASE("an update's source must be laid out like what it replaces and share no memory with what is written",
          "[kernels][optimizer]") {
  Tensor block = Tensor::zeros({64}), value = block.view(0, {16}), m = block.view(16, {16}), v = block.view(32, {16});
  Tensor other = Tensor::zeros({48});
  const Tensor from_value = other.view(0, {16}), from_m = other.view(16, {16}), from_v = other.view(32, {16});
  CHECK_NOTHROW(check_update_source({}, value, &m, &v, "adamw_update"));
  CHECK_NOTHROW(check_update_source({&from_value, &from_m, &from_v}, value, &m, &v, "adamw_update"));
  CHECK_NOTHROW(check_update_source({&from_value, nullptr, nullptr}, value, &m, nullptr, "sgd_update"));

  using Catch::Matchers::Contains;
  const Tensor shifted = block.view(8, {16});  // overlaps value and m
  CHECK_THROWS_WITH(check_update_source({&shifted, nullptr, nullptr}, value, &m, &v, "adamw_update"),
                    Contains("adamw_update: the update's source value shares memory"));
  CHECK_THROWS_WITH(check_update_source({&from_value, &value, nullptr}, value, &m, &v, "adamw_update"),
                    Contains("source m shares memory"));  // m read from the value being written
  CHECK_THROWS_WITH(check_update_source({&value, nullptr, nullptr}, value, &m, &v, "sgd_update"),
                    Contains("pass none for an update in place"));
  const Tensor short_source = other.view(0, {15});
  CHECK_THROWS_WITH(check_update_source({&short_source, nullptr, nullptr}, value, &m, &v, "sgd_update"),
                    Contains("has 15 elements, the updated tensor 16"));
  const Tensor wrong_dtype = Tensor::zeros({16}, DType::f64);
  CHECK_THROWS_WITH(check_update_source({&wrong_dtype, nullptr, nullptr}, value, &m, &v, "sgd_update"),
                    Contains("dtype and device"));
  CHECK_THROWS_WITH(check_update_source({nullptr, &from_m, nullptr}, value, nullptr, nullptr, "sgd_update"),
                    Contains("the update writes no m"));
  const Tensor empty_source, empty_value;
  CHECK_NOTHROW(check_update_source({&empty_source, nullptr, nullptr}, empty_value, nullptr, nullptr, "sgd_update"));
}
