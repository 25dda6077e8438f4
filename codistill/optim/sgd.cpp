#include "codistill/optim/sgd.hpp"

#include <cmath>
#include <stdexcept>

#include "codistill/optim/slot.hpp"
#include "kernels/cuda/optimizer.hpp"

namespace codistill {

using optim_detail::kParallelMin;

namespace {

// One fused pass per parameter. The three variants are separate loops so each vectorizes
// without a branch; every element is independent, so the OpenMP split is deterministic.
template <class T>
void sgd_plain(T* p, const T* g, std::int64_t n, T lr, T wd) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

template <class T, bool Nesterov>
void sgd_momentum(T* p, const T* g, T* buf, std::int64_t n, T lr, T wd, T mu) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const T d = g[i] + wd * p[i];
    const T b = mu * buf[i] + d;
    buf[i] = b;
    p[i] -= lr * (Nesterov ? d + mu * b : b);
  }
}

}  // namespace

SGD::SGD(std::vector<NamedParam> params, double momentum, bool nesterov, double weight_decay)
    : momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  if (!(momentum >= 0.0 && momentum < 1.0))
    throw std::invalid_argument("sgd: momentum must be in [0, 1), got " + std::to_string(momentum));
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay)))
    throw std::invalid_argument("sgd: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  if (nesterov && momentum == 0.0)
    throw std::invalid_argument("sgd: nesterov needs momentum > 0");
  for (auto& p : params) {
    optim_detail::check_param(p);
    slots_.push_back({std::move(p), {}});
  }
}

void SGD::step(double lr) {
  if (!std::isfinite(lr)) throw std::invalid_argument("sgd: learning rate is not finite");
  if (auto device = optim_detail::cuda_device(slots_)) {
    step_cuda(lr, *device);
    ++t_;
    return;
  }
  for (auto& s : slots_) {
    if (momentum_ > 0) optim_detail::ensure_slot(s.momentum, s.param);
    kernels::Tensor& v = *s.param.value;
    kernels::dispatch_floating(v.dtype(), [&]<class T>() {
      T* p = v.data<T>();
      const T* g = s.param.grad->data<T>();
      const auto lr_t = static_cast<T>(lr), wd = static_cast<T>(weight_decay_),
                 mu = static_cast<T>(momentum_);
      if (momentum_ == 0) sgd_plain<T>(p, g, v.numel(), lr_t, wd);
      else if (nesterov_) sgd_momentum<T, true>(p, g, s.momentum.data<T>(), v.numel(), lr_t, wd, mu);
      else sgd_momentum<T, false>(p, g, s.momentum.data<T>(), v.numel(), lr_t, wd, mu);
    });
  }
  ++t_;
}

void SGD::step_cuda(double lr, kernels::Device device) {
  namespace cuda = kernels::cuda;
  const cuda::Context& ctx = optim_detail::step_context(ctx_, device, "sgd");
  std::vector<cuda::ParamSlice> slices;
  slices.reserve(slots_.size());
  for (auto& s : slots_) {
    if (momentum_ > 0) optim_detail::ensure_slot(s.momentum, s.param);
    cuda::ParamSlice p;
    p.value = s.param.value->data<float>();
    p.grad = s.param.grad->data<float>();
    p.slot0 = momentum_ > 0 ? s.momentum.data<float>() : nullptr;
    p.n = s.param.value->numel();
    slices.push_back(p);
  }
  // The casts of the CPU path's float instantiation.
  cuda::SgdScalars sc;
  sc.lr = static_cast<float>(lr);
  sc.weight_decay = static_cast<float>(weight_decay_);
  sc.momentum = static_cast<float>(momentum_);
  sc.nesterov = nesterov_;
  cuda::sgd_step(slices, sc, ctx);
}

std::map<std::string, std::map<std::string, kernels::Tensor*>> SGD::state() {
  std::map<std::string, std::map<std::string, kernels::Tensor*>> out;
  if (momentum_ == 0) return out;
  for (auto& s : slots_) {
    optim_detail::ensure_slot(s.momentum, s.param);
    out[s.param.path]["momentum"] = &s.momentum;
  }
  return out;
}

}  // namespace codistill
