#include "kernels/cpu/elementwise.hpp"

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"

namespace codistill::kernels::cpu {

namespace {
// Memory-bound loops: threads pay off only for large arrays.
constexpr std::int64_t kParallelMin = 1 << 16;
}  // namespace

template <class T>
void multiply(const T* x, const T* m, T* y, std::int64_t n, Impl impl) {
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * m[i];
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * m[i];
}

template <class T>
void add(const T* a, const T* b, T* y, std::int64_t n, Impl impl) {
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// relu_forward's rule on the sum (NaN -> 0): the same value add then relu would give.
template <class T>
void add_relu(const T* a, const T* b, T* y, std::int64_t n, Impl impl) {
  if (impl == Impl::reference) {
    for (std::int64_t i = 0; i < n; ++i) {
      const T v = a[i] + b[i];
      y[i] = v > T(0) ? v : T(0);
    }
    return;
  }
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const T v = a[i] + b[i];
    y[i] = v > T(0) ? v : T(0);
  }
}

template void multiply<float>(const float*, const float*, float*, std::int64_t, Impl);
template void multiply<double>(const double*, const double*, double*, std::int64_t, Impl);
template void add<float>(const float*, const float*, float*, std::int64_t, Impl);
template void add<double>(const double*, const double*, double*, std::int64_t, Impl);
template void add_relu<float>(const float*, const float*, float*, std::int64_t, Impl);
template void add_relu<double>(const double*, const double*, double*, std::int64_t, Impl);

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

using namespace backend_detail;

void CpuBackend::multiply(const Tensor& x, const Tensor& m, Tensor& y, Queue& q) {
  run_op(*this, Op::multiply, x.dtype(), "multiply", [&]<class T>() {
    cpu::multiply<T>(x.data<T>(), m.data<T>(), y.data<T>(), x.numel(), impl_of(q));
  });
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& y, Queue& q) {
  run_op(*this, Op::add, a.dtype(), "add", [&]<class T>() {
    cpu::add<T>(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), impl_of(q));
  });
}

void CpuBackend::add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, Queue& q) {
  run_op(*this, Op::add_activation, a.dtype(), "add+activation", [&]<class T>() {
    check_fused_relu(act, "add+activation");
    cpu::add_relu<T>(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), impl_of(q));
  });
}

}  // namespace codistill::kernels::cpu
