#pragma once
// Elementwise kernels (grid-stride loops; I is uint32 when the size allows: cheaper % on a
// GPU): bias + activation forward, the activations (relu, gelu, silu) and their backward,
// the channel bias, the dropout multiply and the residual add (with an optional fused relu).
// Launched by bias_activation.cu with shapes::elementwise; run by the tests under the SIMT
// executor. The formulas are those of kernels/cpu/activation.cpp, in float.
#include "kernels/cuda/device_api.cuh"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda::device {
inline namespace CODISTILL_DEVICE_ABI {

using kernels::Activation;

// Phi(x) = erfc(-x / sqrt2) / 2: the erfc form keeps the digits of tiny outputs for
// negative x that 1 + erf(.) would cancel away (as the CPU twin).
__device__ __forceinline__ float normal_cdf(float x) {
  return 0.5f * erfcf(-x * 0.70710678118654752f);
}

// 1 / (1 + exp(-v)): exp overflows to inf below v = -88 and the quotient to 0, the limit
// (silu(-inf) = -inf * 0 is NaN, as the CPU twin's).
__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// GELU's tanh form as x sigmoid(2u) (1 + tanh(u) = 2 sigmoid(2u)), u = sqrt(2/pi) (x + 0.044715
// x^3), as the CPU twin computes it.
__device__ __forceinline__ float gelu_tanh_2u(float v) {
  return 1.5957691216057308f * (v + 0.044715f * v * v * v);
}

template <Activation A>
__device__ __forceinline__ float act_forward(float v) {
  if constexpr (A == Activation::relu) return v > 0.0f ? v : 0.0f;
  else if constexpr (A == Activation::gelu) return v * normal_cdf(v);
  else if constexpr (A == Activation::silu) return v * sigmoid(v);
  else if constexpr (A == Activation::gelu_tanh) return v * sigmoid(gelu_tanh_2u(v));
  else return v;
}

// dy * act'(.) from what the backward keeps: y for relu, the input for gelu and silu.
template <Activation A>
__device__ __forceinline__ float act_backward(float saved, float dy) {
  if constexpr (A == Activation::relu) {
    return saved > 0.0f ? dy : 0.0f;
  } else if constexpr (A == Activation::gelu) {
    const float pdf = 0.39894228040143268f * expf(-0.5f * saved * saved);
    return dy * (normal_cdf(saved) + saved * pdf);
  } else if constexpr (A == Activation::silu) {
    const float s = sigmoid(saved);
    return dy * (s * (1.0f + saved * (1.0f - s)));
  } else if constexpr (A == Activation::gelu_tanh) {
    const float s = sigmoid(gelu_tanh_2u(saved));
    const float du = 0.79788456080286536f * (1.0f + 0.134145f * saved * saved);
    return dy * (s + 2.0f * saved * s * (1.0f - s) * du);
  } else {
    return dy;
  }
}

template <class I>
__device__ __forceinline__ I first_index() {
  return blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x;
}
template <class I>
__device__ __forceinline__ I grid_stride() {
  return static_cast<I>(gridDim.x) * blockDim.x;
}

// y = act(y + b[i % N]) in place (b may be null); pre = y + b where the backward needs it
// (gelu, silu: keeps_input).
template <Activation A, class I>
__global__ void bias_act_forward_kernel(float* y, const float* b, float* pre, I total, I N) {
  for (I i = first_index<I>(); i < total; i += grid_stride<I>()) {
    const float v = y[i] + (b ? b[i % N] : 0.0f);
    if (keeps_input(A) && pre) pre[i] = v;
    y[i] = act_forward<A>(v);
  }
}

template <Activation A, class I>
__global__ void act_forward_kernel(const float* x, float* y, I n) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) y[i] = act_forward<A>(x[i]);
}

// saved may be null for none. dx may alias dy (each element read before it is written).
template <Activation A, class I>
__global__ void act_backward_kernel(const float* saved, const float* dy, float* dx, I n) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>())
    dx[i] = act_backward<A>(A == Activation::none ? 0.0f : saved[i], dy[i]);
}

// y[B, C, S] += b[C] (NCHW).
template <class I>
__global__ void bias_channels_kernel(float* y, const float* b, I total, I C, I S) {
  for (I i = first_index<I>(); i < total; i += grid_stride<I>()) y[i] += b[(i / S) % C];
}

template <class I>
__global__ void multiply_kernel(const float* x, const float* mask, float* y, I n) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) y[i] = x[i] * mask[i];
}

// y = act(a + b): A = none the residual add, relu the fused residual sum + relu
// (Op::add_activation; NaN -> 0 as relu_forward). y may alias a or b (each element read
// before it is written).
template <class I, Activation A = Activation::none>
__global__ void add_kernel(const float* a, const float* b, float* y, I n) {
  for (I i = first_index<I>(); i < n; i += grid_stride<I>()) y[i] = act_forward<A>(a[i] + b[i]);
}

}  // namespace CODISTILL_DEVICE_ABI
}  // namespace codistill::kernels::cuda::device
