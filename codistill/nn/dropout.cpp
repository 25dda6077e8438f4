#include "codistill/nn/dropout.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "codistill/nn/buffer.hpp"
#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace codistill {

using kernels::Tensor;

Dropout::Dropout(double p) : p_(p), rng_(0) {
  if (!(p >= 0.0 && p < 1.0))
    throw std::invalid_argument("dropout: p must be in [0, 1), got " + std::to_string(p));
}

void Dropout::init_params(Rng& rng, const std::string& /*init*/) { rng_.reseed(rng.next_u64()); }

Tensor Dropout::forward(const Tensor& x, bool training) {
  active_ = training && p_ > 0.0;
  if (!active_) return x;
  nn::check_input(x, x.dtype(), device_, "dropout");
  if (device_.is_cuda()) return forward_cuda(x);
  nn::ensure_buffer(mask_, x.shape(), x.dtype());
  nn::ensure_buffer(y_, x.shape(), x.dtype());
  // Drop when a raw 64-bit draw falls below p * 2^64: one integer compare per element, no
  // float conversion. p < 1 keeps the threshold below 2^64.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p_, 64));
  kernels::dispatch_floating(x.dtype(), [&]<class T>() {
    const T scale = static_cast<T>(1.0 / (1.0 - p_));
    T* m = mask_.data<T>();
    const std::int64_t n = x.numel();
    // The draws stay sequential (one stream, deterministic); the multiply is a separate
    // vectorizable pass.
    for (std::int64_t i = 0; i < n; ++i) m[i] = rng_.next_u64() < threshold ? T(0) : scale;
    const T* xs = x.data<T>();
    T* ys = y_.data<T>();
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) ys[i] = xs[i] * m[i];
  });
  return y_;
}

void Dropout::to_device(kernels::Device device, const kernels::cuda::Context& ctx) {
  Layer::to_device(device, ctx);  // waits for the device: the old event has nothing pending
  mask_copied_.reset();           // it may belong to another device
}

Tensor Dropout::forward_cuda(const Tensor& x) {
  namespace cuda = kernels::cuda;
  const std::int64_t n = x.numel();
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  if (!mask_copied_) mask_copied_ = std::make_unique<cuda::Event>(device_.index);
  mask_copied_->synchronize();  // the previous mask's copy has left the pinned buffer
  host_mask_.reserve(bytes);
  // The same draws and values as the CPU path's float loop.
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(p_, 64));
  const auto scale = static_cast<float>(1.0 / (1.0 - p_));
  float* m = host_mask_.as<float>();
  for (std::int64_t i = 0; i < n; ++i) m[i] = rng_.next_u64() < threshold ? 0.0f : scale;
  nn::ensure_buffer(mask_, x.shape(), x.dtype(), device_);
  nn::ensure_buffer(y_, x.shape(), x.dtype(), device_);
  cuda::memcpy_async(mask_.raw(), m, bytes, cuda::CopyKind::host_to_device, ctx_);
  mask_copied_->record(ctx_.stream);
  cuda::multiply(x.data<float>(), mask_.data<float>(), y_.data<float>(), n, ctx_);
  return y_;
}

Tensor Dropout::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  if (!active_) return dy;
  kernels::check_shape(dy, mask_.shape(), "dropout backward: dy");
  nn::check_input(dy, mask_.dtype(), device_, "dropout backward");
  if (device_.is_cuda()) {
    nn::ensure_buffer(dx_, dy.shape(), dy.dtype(), device_);
    kernels::cuda::multiply(dy.data<float>(), mask_.data<float>(), dx_.data<float>(), dy.numel(), ctx_);
    return dx_;
  }
  nn::ensure_buffer(dx_, dy.shape(), dy.dtype());
  kernels::dispatch_floating(dy.dtype(), [&]<class T>() {
    const T* g = dy.data<T>();
    const T* m = mask_.data<T>();
    T* d = dx_.data<T>();
    const std::int64_t n = dy.numel();
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) d[i] = g[i] * m[i];
  });
  return dx_;
}

}  // namespace codistill
