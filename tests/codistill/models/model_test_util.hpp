#pragma once
// Helpers shared by the model tests: random inputs, a softmax cross-entropy in double and
// the whole-model finite-difference gradient check.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <utility>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/impl.hpp"
#include "support/test_util.hpp"

namespace codistill::model_test {

using kernels::DType;
using kernels::Shape;
using kernels::Tensor;
using kernels::cpu::Impl;

inline Tensor random_input(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  auto v = test::random_vector<double>(static_cast<std::size_t>(kernels::shape_numel(shape)), seed);
  return Tensor::from_vector(shape, v).to(dtype);
}

inline std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(DType::f64);
  return {d.data<double>(), d.data<double>() + d.numel()};
}

// Mean softmax cross-entropy of logits [B, V] against labels; writes dL/dlogits.
inline double softmax_ce(const Tensor& logits, const std::vector<int>& labels, Tensor* grad) {
  const std::int64_t B = logits.dim(0), V = logits.dim(1);
  const double* z = logits.data<double>();
  double loss = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    double mx = z[b * V];
    for (std::int64_t j = 1; j < V; ++j) mx = std::max(mx, z[b * V + j]);
    double sum = 0;
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(z[b * V + j] - mx);
    loss += std::log(sum) + mx - z[b * V + labels[b]];
    if (grad)
      for (std::int64_t j = 0; j < V; ++j)
        grad->data<double>()[b * V + j] =
            (std::exp(z[b * V + j] - mx) / sum - (j == labels[b] ? 1.0 : 0.0)) / static_cast<double>(B);
  }
  return loss / static_cast<double>(B);
}

// Every parameter gradient of the whole model against central differences of the loss.
// Dropout layers get their rng state restored before each forward (one fixed mask).
inline void check_model_gradients(Model& m, const Shape& x_shape, std::uint64_t seed) {
  m.to_dtype(DType::f64);
  const Tensor x = random_input(x_shape, seed, DType::f64);
  const std::int64_t classes = m.params().back().value->dim(0);
  std::vector<int> labels;
  Rng rng(seed);
  for (std::int64_t b = 0; b < x_shape[0]; ++b) labels.push_back(static_cast<int>(rng.below(classes)));
  std::vector<std::pair<Rng*, Rng::State>> states;
  for (auto& [name, r] : m.rngs()) states.emplace_back(r, r->state());
  auto restore = [&] {
    for (auto& [r, s] : states) r->set_state(s);
  };
  auto loss = [&] {
    restore();
    return softmax_ce(m.forward(x, true), labels, nullptr);
  };
  for (Impl impl : {Impl::reference, Impl::fast}) {
    INFO("impl " << (impl == Impl::fast ? "fast" : "reference"));
    m.set_reference(impl == Impl::reference);
    m.zero_grad();
    restore();
    Tensor logits = m.forward(x, true);
    Tensor dlogits = Tensor::empty(logits.shape(), DType::f64);
    softmax_ce(logits, labels, &dlogits);
    m.backward(dlogits);
    for (auto& p : m.params()) {
      INFO("param " << p.path);
      std::vector<double*> ptrs;
      for (std::int64_t i = 0; i < p.value->numel(); ++i) ptrs.push_back(p.value->data<double>() + i);
      const std::vector<double> analytic = values(*p.grad);
      CHECK(test::max_rel_error(analytic, test::numeric_gradient(loss, ptrs)) < 1e-5);
      double norm = 0;
      for (double g : analytic) norm += g * g;
      CHECK(norm > 0);  // every layer, the first included, received a gradient
    }
  }
}

// Same shape, dtype and bytes (bit-identical results).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Token ids [B, T] drawn uniformly below V.
inline Tensor token_batch(std::int64_t B, std::int64_t T, std::int64_t V, std::uint64_t seed) {
  Tensor t = Tensor::empty({B, T}, DType::i32);
  Rng rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(V)));
  return t;
}

}  // namespace codistill::model_test
