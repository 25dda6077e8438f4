#pragma once
// Fused bias + activation kernels (one pass over the activations instead of two or three).
//   bias_activation_forward:  pre = y + b[col] (stored only when pre is not null and the
//       activation's backward needs it: gelu, silu), y = act(y + b) in place. b may be null.
//   bias_activation_backward: dpre = dy * act'(.) (from y for relu, from pre for gelu and silu,
//       nothing for none), written to dpre (may alias dy); db[N] (+)= column sums of dpre
//       (db may be null). For Activation::none it is just the bias gradient.
//   activation_forward / activation_backward: the plain elementwise versions of
//       kernels/cpu/activation.hpp (relu backward from y, gelu and silu backward from x).
//   bias_add_channels / bias_grad_channels: y[B,C,S] += b[C] and its gradient (NCHW).
//   multiply / add / add_relu: the elementwise ops of kernels/cpu/elementwise.hpp.
// The CPU twins are kernels/cpu/bias.hpp and kernels/cpu/activation.hpp; gelu is the
// exact erf form in both.
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/ops.hpp"

namespace codistill::kernels::cuda {

using Activation = kernels::Activation;  // kernels/ops.hpp

void bias_activation_forward(float* y, const float* b, float* pre, std::int64_t M, std::int64_t N,
                             Activation act, const Context& ctx);
// saved: y (the activation output) for relu, pre for gelu and silu, ignored for none.
void bias_activation_backward(const float* dy, const float* saved, float* dpre, float* db,
                              std::int64_t M, std::int64_t N, Activation act, bool accumulate,
                              const Context& ctx);

void activation_forward(const float* x, float* y, std::int64_t n, Activation act, const Context& ctx);
// saved: y for relu, x for gelu and silu. dx may alias dy.
void activation_backward(const float* saved, const float* dy, float* dx, std::int64_t n,
                         Activation act, const Context& ctx);

void bias_add_channels(float* y, const float* b, std::int64_t B, std::int64_t C, std::int64_t S,
                       const Context& ctx);
void bias_grad_channels(const float* dy, float* db, std::int64_t B, std::int64_t C, std::int64_t S,
                        bool accumulate, const Context& ctx);

// y[i] = x[i] * mask[i] (dropout with a mask drawn on the host, already scaled by 1/keep).
void multiply(const float* x, const float* mask, float* y, std::int64_t n, const Context& ctx);
// y[i] = a[i] + b[i] (residual connections); y may alias a or b.
void add(const float* a, const float* b, float* y, std::int64_t n, const Context& ctx);
// y[i] = relu(a[i] + b[i]) (Op::add_activation: a residual sum and the relu after it, NaN ->
// 0 as kernels/cpu/elementwise.hpp's add_relu); y may alias a or b.
void add_relu(const float* a, const float* b, float* y, std::int64_t n, const Context& ctx);

}  // namespace codistill::kernels::cuda
