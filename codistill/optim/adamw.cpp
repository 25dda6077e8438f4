#include "codistill/optim/adamw.hpp"

#include <cmath>
#include <stdexcept>

#include "codistill/optim/slot.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace codistill {

using optim_detail::kParallelMin;

namespace {

// One fused pass: decay, both moments and the update, each element independent (the
// OpenMP split cannot change the result).
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, T decay, T b1, T b2,
                  T step_size, T inv_sqrt_bc2, T eps) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

AdamW::AdamW(std::vector<NamedParam> params, double beta1, double beta2, double eps, double weight_decay)
    : beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    throw std::invalid_argument("adamw: beta1 and beta2 must be in [0, 1), got " +
                                std::to_string(beta1) + ", " + std::to_string(beta2));
  if (!(eps > 0.0)) throw std::invalid_argument("adamw: eps must be > 0, got " + std::to_string(eps));
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay)))
    throw std::invalid_argument("adamw: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  for (auto& p : params) {
    optim_detail::check_param(p);
    slots_.push_back({std::move(p), {}, {}});
  }
}

void AdamW::step(double lr) {
  if (!std::isfinite(lr)) throw std::invalid_argument("adamw: learning rate is not finite");
  ++t_;
  // Scalars in double, as PyTorch computes them in Python floats.
  const double t = static_cast<double>(t_);
  const double bc1 = 1.0 - std::pow(beta1_, t);
  const double bc2 = 1.0 - std::pow(beta2_, t);
  const double step_size = lr / bc1;
  const double inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  const double decay = 1.0 - lr * weight_decay_;
  if (auto device = optim_detail::cuda_device(slots_)) {
    namespace cuda = kernels::cuda;
    const cuda::Context& ctx = optim_detail::step_context(ctx_, *device, "adamw");
    std::vector<cuda::ParamSlice> slices;
    slices.reserve(slots_.size());
    for (auto& s : slots_) {
      optim_detail::ensure_slot(s.m, s.param);
      optim_detail::ensure_slot(s.v, s.param);
      cuda::ParamSlice p;
      p.value = s.param.value->data<float>();
      p.grad = s.param.grad->data<float>();
      p.slot0 = s.m.data<float>();
      p.slot1 = s.v.data<float>();
      p.n = s.param.value->numel();
      slices.push_back(p);
    }
    // The casts of the CPU path's float instantiation.
    cuda::AdamWScalars sc;
    sc.decay = static_cast<float>(decay);
    sc.beta1 = static_cast<float>(beta1_);
    sc.beta2 = static_cast<float>(beta2_);
    sc.step_size = static_cast<float>(step_size);
    sc.inv_sqrt_bc2 = static_cast<float>(inv_sqrt_bc2);
    sc.eps = static_cast<float>(eps_);
    cuda::adamw_step(slices, sc, ctx);
    return;
  }
  for (auto& s : slots_) {
    optim_detail::ensure_slot(s.m, s.param);
    optim_detail::ensure_slot(s.v, s.param);
    kernels::Tensor& val = *s.param.value;
    kernels::dispatch_floating(val.dtype(), [&]<class T>() {
      adamw_update<T>(val.data<T>(), s.param.grad->data<T>(), s.m.data<T>(), s.v.data<T>(), val.numel(),
                      static_cast<T>(decay), static_cast<T>(beta1_), static_cast<T>(beta2_),
                      static_cast<T>(step_size), static_cast<T>(inv_sqrt_bc2), static_cast<T>(eps_));
    });
  }
}

std::map<std::string, std::map<std::string, kernels::Tensor*>> AdamW::state() {
  std::map<std::string, std::map<std::string, kernels::Tensor*>> out;
  for (auto& s : slots_) {
    optim_detail::ensure_slot(s.m, s.param);
    optim_detail::ensure_slot(s.v, s.param);
    out[s.param.path]["adam_m"] = &s.m;
    out[s.param.path]["adam_v"] = &s.v;
  }
  return out;
}

}  // namespace codistill
