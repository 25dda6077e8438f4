#include "codistill/nn/init.hpp"

#include <cmath>
#include <stdexcept>

#include "codistill/util/rng.hpp"

namespace codistill::nn {

std::vector<std::string> init_kinds() { return {"kaiming_normal", "kaiming_uniform", "xavier_uniform"}; }

void check_init_kind(const std::string& init) {
  for (const auto& k : init_kinds())
    if (k == init) return;
  std::string valid;
  for (const auto& k : init_kinds()) valid += (valid.empty() ? "" : ", ") + k;
  throw std::invalid_argument("unknown init '" + init + "' (valid: " + valid + ")");
}

namespace {

enum class Dist { uniform, normal, zero };

void fill(kernels::Tensor& t, Dist dist, double scale, Rng& rng) {
  kernels::dispatch_floating(t.dtype(), [&]<class T>() {
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      double v = 0;
      if (dist == Dist::uniform) v = rng.uniform(-scale, scale);
      else if (dist == Dist::normal) v = scale * rng.normal();
      p[i] = static_cast<T>(v);
    }
  });
}

}  // namespace

void init_weight_bias(kernels::Tensor& weight, kernels::Tensor* bias, std::int64_t fan_in,
                      std::int64_t fan_out, Rng& rng, const std::string& init) {
  check_init_kind(init);
  if (fan_in < 1 || fan_out < 1)
    throw std::invalid_argument("init: fan_in and fan_out must be >= 1");
  const double fi = static_cast<double>(fan_in);
  if (init == "kaiming_uniform") {
    // gain sqrt(2/(1+a^2)) with a = sqrt(5) is sqrt(1/3); bound = gain*sqrt(3/fan_in).
    const double bound = 1.0 / std::sqrt(fi);
    fill(weight, Dist::uniform, bound, rng);
    if (bias) fill(*bias, Dist::uniform, bound, rng);
  } else if (init == "kaiming_normal") {
    fill(weight, Dist::normal, std::sqrt(2.0 / fi), rng);
    if (bias) fill(*bias, Dist::zero, 0, rng);
  } else {  // xavier_uniform
    fill(weight, Dist::uniform, std::sqrt(6.0 / (fi + static_cast<double>(fan_out))), rng);
    if (bias) fill(*bias, Dist::zero, 0, rng);
  }
}

void init_normal(kernels::Tensor& weight, double std, Rng& rng) { fill(weight, Dist::normal, std, rng); }

}  // namespace codistill::nn
