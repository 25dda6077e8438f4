#pragma once
// The finite-difference gradient check of the layer tests (tests/codistill/nn), shared by
// the files that check layers: objective sum(y * r) for a random r, so dL/dy = r; dx and
// every parameter gradient against central differences, gradients accumulating across
// backward calls, and need_dx = false still yielding the parameter gradients.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <vector>

#include "codistill/nn/module.hpp"
#include "kernels/cpu/impl.hpp"
#include "support/test_util.hpp"

namespace codistill::test {

// Central differences with h = 1e-6 carry ~1e-9 absolute round-off; max_rel_error divides
// by at least 1e-3, so 1e-5 leaves margin while any real bug shows up as O(1).
constexpr double kTol = 1e-5;

inline std::vector<double> values(const kernels::Tensor& t) {
  kernels::Tensor d = t.to(kernels::DType::f64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

inline std::vector<double*> pointers(kernels::Tensor& t) {
  std::vector<double*> out;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<double>() + i);
  return out;
}

inline kernels::Tensor random_tensor(const kernels::Shape& shape, std::uint64_t seed, double lo = -1,
                                     double hi = 1) {
  return kernels::Tensor::from_vector(
      shape, random_vector<double>(static_cast<std::size_t>(kernels::shape_numel(shape)), seed, lo, hi));
}

// before() runs ahead of every forward (dropout restores its rng there, so that every
// evaluation of the objective sees one mask).
// training: the mode of every forward (BatchNorm's statistics differ between the two).
inline void check_gradients(Module& layer, kernels::Tensor x, std::uint64_t seed, kernels::cpu::Impl impl,
                            const std::function<void()>& before = [] {}, bool training = true) {
  INFO("layer " << layer.kind() << ", impl " << (impl == kernels::cpu::Impl::fast ? "fast" : "reference")
                << ", input " << kernels::shape_str(x.shape()) << (training ? "" : ", eval"));
  layer.to_dtype(kernels::DType::f64);
  layer.set_reference(impl == kernels::cpu::Impl::reference);
  std::vector<NamedParam> params = collect_params(layer);
  for (auto& p : params) p.grad->zero();

  before();
  const kernels::Tensor y0 = layer.forward(x, training);
  kernels::Tensor r = random_tensor(y0.shape(), seed ^ 0x9e3779b97f4a7c15ull);
  auto objective = [&] {
    before();
    kernels::Tensor y = layer.forward(x, training);
    double s = 0;
    for (std::int64_t i = 0; i < y.numel(); ++i) s += y.data<double>()[i] * r.data<double>()[i];
    return s;
  };

  // Analytic gradients first (copied: the returned tensors are the layer's own buffers).
  before();
  layer.forward(x, training);
  const std::vector<double> dx = values(layer.backward(r, true));
  std::vector<std::vector<double>> dparams;
  for (auto& p : params) dparams.push_back(values(*p.grad));

  CHECK(max_rel_error(dx, numeric_gradient(objective, pointers(x))) < kTol);
  for (std::size_t k = 0; k < params.size(); ++k) {
    INFO("param " << params[k].path);
    CHECK(max_rel_error(dparams[k], numeric_gradient(objective, pointers(*params[k].value))) < kTol);
  }

  // A second backward adds the same gradient again; after zeroing, need_dx = false still
  // produces the parameter gradients and returns no input gradient.
  before();
  layer.forward(x, training);
  layer.backward(r, true);
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::vector<double> twice = dparams[k];
    for (auto& v : twice) v *= 2;
    CHECK(max_rel_error(values(*params[k].grad), twice) < 1e-12);
  }
  for (auto& p : params) p.grad->zero();
  before();
  layer.forward(x, training);
  CHECK_FALSE(layer.backward(r, false).defined());
  for (std::size_t k = 0; k < params.size(); ++k) CHECK(max_rel_error(values(*params[k].grad), dparams[k]) < 1e-12);
}


}  // namespace codistill::test
