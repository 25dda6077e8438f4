#pragma once
// Optimizer updates on CUDA over all parameters in one kernel launch (a table of
// parameter slices in device memory, each thread block walking chunks of one slice), with
// the exact arithmetic of codistill/optim/sgd.cpp and adamw.cpp in float32:
//   sgd:    d = g + wd*p;  b = mu*b + d;  p -= lr * (nesterov ? d + mu*b : b)
//           (mu = 0: p -= lr * d, slot0 unused)
//   adamw:  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//           p = p*decay - step_size * m / (sqrt(v)*inv_sqrt_bc2 + eps)
// The scalars are computed on the host as the CPU optimizers do (in double, then cast).
#include <cstdint>
#include <vector>

#include "kernels/cuda/context.hpp"

namespace codistill::kernels::cuda {

struct ParamSlice {
  float* value = nullptr;
  const float* grad = nullptr;
  float* slot0 = nullptr;  // sgd: momentum; adamw: m
  float* slot1 = nullptr;  // adamw: v
  std::int64_t n = 0;
};

struct SgdScalars {
  float lr = 0, weight_decay = 0, momentum = 0;
  bool nesterov = false;
  float grad_scale = 1;
};

struct AdamWScalars {
  float decay = 1, beta1 = 0.9f, beta2 = 0.999f, step_size = 0, inv_sqrt_bc2 = 1, eps = 1e-8f;
  float grad_scale = 1;
};

void sgd_step(const std::vector<ParamSlice>& params, const SgdScalars& s, const Context& ctx);
void adamw_step(const std::vector<ParamSlice>& params, const AdamWScalars& s, const Context& ctx);

}  // namespace codistill::kernels::cuda
