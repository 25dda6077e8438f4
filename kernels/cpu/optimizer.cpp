#include "kernels/cpu/optimizer.hpp"

#include <cmath>
#include <stdexcept>

namespace codistill::kernels::cpu {

namespace {

// Below this many elements one thread updates everything: spawning the team costs more
// than the loop.
constexpr std::int64_t kParallelMin = 1 << 15;

// The three SGD variants are separate loops so that each vectorizes without a branch.
template <class T>
void sgd_plain(T* p, const T* g, std::int64_t n, T lr, T wd, bool parallel) {
#pragma omp parallel for simd schedule(static) if (parallel)
  for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

template <class T, bool Nesterov>
void sgd_momentum(T* p, const T* g, T* buf, std::int64_t n, T lr, T wd, T mu, bool parallel) {
#pragma omp parallel for simd schedule(static) if (parallel)
  for (std::int64_t i = 0; i < n; ++i) {
    const T d = g[i] + wd * p[i];
    const T b = mu * buf[i] + d;
    buf[i] = b;
    p[i] -= lr * (Nesterov ? d + mu * b : b);
  }
}

}  // namespace

template <class T>
void sgd_update(T* p, const T* g, T* momentum, std::int64_t n, const SgdScalars& s, Impl impl) {
  const bool parallel = impl == Impl::fast && n >= kParallelMin;
  const auto lr = static_cast<T>(s.lr), wd = static_cast<T>(s.weight_decay), mu = static_cast<T>(s.momentum);
  if (s.momentum == 0) return sgd_plain<T>(p, g, n, lr, wd, parallel);
  if (!momentum) throw std::invalid_argument("sgd_update: momentum > 0 needs a momentum slot");
  if (s.nesterov) sgd_momentum<T, true>(p, g, momentum, n, lr, wd, mu, parallel);
  else sgd_momentum<T, false>(p, g, momentum, n, lr, wd, mu, parallel);
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamWScalars& s, Impl impl) {
  const bool parallel = impl == Impl::fast && n >= kParallelMin;
  const auto decay = static_cast<T>(s.decay), b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2),
             step_size = static_cast<T>(s.step_size), inv_sqrt_bc2 = static_cast<T>(s.inv_sqrt_bc2),
             eps = static_cast<T>(s.eps);
#pragma omp parallel for simd schedule(static) if (parallel)
  for (std::int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

template void sgd_update<float>(float*, const float*, float*, std::int64_t, const SgdScalars&, Impl);
template void sgd_update<double>(double*, const double*, double*, std::int64_t, const SgdScalars&, Impl);
template void adamw_update<float>(float*, const float*, float*, float*, std::int64_t, const AdamWScalars&, Impl);
template void adamw_update<double>(double*, const double*, double*, double*, std::int64_t, const AdamWScalars&,
                                   Impl);

}  // namespace codistill::kernels::cpu
