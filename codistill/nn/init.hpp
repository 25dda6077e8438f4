#pragma once
// Parameter initializers shared by Linear and Conv2d (fan_in = in * k * k).
//   kaiming_uniform: PyTorch's default for nn.Linear/nn.Conv2d (kaiming_uniform_ with
//                    a = sqrt(5)): weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
//   kaiming_normal:  weight ~ N(0, 2/fan_in) (He, for ReLU), bias = 0.
//   xavier_uniform:  weight ~ U(-b, b), b = sqrt(6/(fan_in+fan_out)), bias = 0.
// Values are drawn in double from the Rng in element order (weight first, then bias), so
// a model built from one seed is bit-identical on every platform.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace codistill {
class Rng;
}

namespace codistill::nn {

std::vector<std::string> init_kinds();
// Throws std::invalid_argument("unknown init 'x' (valid: ...)").
void check_init_kind(const std::string& init);

// bias may be null (a layer without bias).
void init_weight_bias(kernels::Tensor& weight, kernels::Tensor* bias, std::int64_t fan_in,
                      std::int64_t fan_out, Rng& rng, const std::string& init);

// weight ~ N(0, std^2), drawn in element order (GPT-2's initialization: std 0.02).
void init_normal(kernels::Tensor& weight, double std, Rng& rng);

}  // namespace codistill::nn
