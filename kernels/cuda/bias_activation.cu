// Launchers of the fused bias + activation kernels, the channel bias, the dropout multiply
// and the residual add with or without a fused relu (bias_activation.hpp), and of the
// deterministic bias gradients. The kernels are in device/elementwise.cuh (launch:
// shapes::elementwise, launch_shapes.hpp) and device/bias_grad.cuh (with its shapes). The
// backend's entry points of the activation op, multiply and add at the end.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/backend_impl.cuh"
#include "kernels/cuda/bias_activation.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device/bias_grad.cuh"
#include "kernels/cuda/device/elementwise.cuh"
#include "kernels/cuda/entry.cuh"
#include "kernels/cuda/launch_shapes.hpp"

namespace codistill::kernels::cuda {
namespace {

using detail::stream_of;
using device::add_kernel;
using device::act_backward_kernel;
using device::act_forward_kernel;
using device::bias_act_forward_kernel;
using device::bias_channels_kernel;
using device::channel_sum_kernel;
using device::colsum_finish_kernel;
using device::colsum_kernel;
using device::multiply_kernel;
using shapes::small_index;

// kernel<<<shape>>> on the context's stream.
#define CODISTILL_LAUNCH(kernel, shape, ctx)                                              \
  kernel<<<dim3((shape).grid.x, (shape).grid.y, (shape).grid.z),                          \
           dim3((shape).block.x, (shape).block.y, (shape).block.z), (shape).smem,         \
           stream_of(ctx)>>>

template <Activation A>
void column_sums(const float* dy, const float* saved, float* dpre, float* db, std::int64_t M,
                 std::int64_t N, bool accumulate, const Context& ctx) {
  const auto shape = shapes::column_sums(M, N);
  double* partial = nullptr;
  if (shape.chunks > 1)
    partial = static_cast<double*>(detail::stream_workspace(
        ctx, sizeof(double) * static_cast<std::size_t>(shape.chunks * N)));
  CODISTILL_LAUNCH(colsum_kernel<A>, shape.sums, ctx)(dy, saved, dpre, M, N, shape.rows, partial,
                                                     db, accumulate);
  CODISTILL_CUDA_LAUNCH_CHECK();
  if (shape.chunks > 1) {
    CODISTILL_LAUNCH(colsum_finish_kernel, shape.finish, ctx)(partial, shape.chunks, N, db,
                                                             accumulate);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
}

template <class Launch>
void launch_sized(std::int64_t n, Launch&& launch) {
  if (small_index(n)) launch(std::uint32_t{0});
  else launch(std::uint64_t{0});
}

template <Activation A>
void bias_act_forward_impl(float* y, const float* b, float* pre, std::int64_t M, std::int64_t N,
                           const Context& ctx) {
  const std::int64_t total = M * N;
  launch_sized(total, [&](auto tag) {
    using I = decltype(tag);
    CODISTILL_LAUNCH((bias_act_forward_kernel<A, I>), shapes::elementwise(total), ctx)(
        y, b, pre, static_cast<I>(total), static_cast<I>(N));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

template <Activation A>
void act_forward_impl(const float* x, float* y, std::int64_t n, const Context& ctx) {
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    CODISTILL_LAUNCH((act_forward_kernel<A, I>), shapes::elementwise(n), ctx)(
        x, y, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

template <Activation A>
void act_backward_impl(const float* saved, const float* dy, float* dx, std::int64_t n,
                       const Context& ctx) {
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    CODISTILL_LAUNCH((act_backward_kernel<A, I>), shapes::elementwise(n), ctx)(
        saved, dy, dx, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

// fn.template operator()<A>() for act: the one switch over the activations here (a new one
// is a case of it, and its formulas in device/elementwise.cuh's act_forward/act_backward).
template <class Fn>
void with_activation(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::none: fn.template operator()<Activation::none>(); break;
    case Activation::relu: fn.template operator()<Activation::relu>(); break;
    case Activation::gelu: fn.template operator()<Activation::gelu>(); break;
    case Activation::silu: fn.template operator()<Activation::silu>(); break;
    case Activation::gelu_tanh: fn.template operator()<Activation::gelu_tanh>(); break;
  }
}

void check_saved(const char* op, Activation act, const float* saved) {
  if (act != Activation::none && !saved)
    throw std::invalid_argument(std::string(op) +
                                " (cuda): relu needs the forward output, gelu and silu their input");
}

}  // namespace

void bias_activation_forward(float* y, const float* b, float* pre, std::int64_t M, std::int64_t N,
                             Activation act, const Context& ctx) {
  detail::check_nonnegative("bias_activation_forward", M, N);
  if (M == 0 || N == 0 || (act == Activation::none && !b)) return;
  detail::use_device(ctx);
  with_activation(act, [&]<Activation A>() { bias_act_forward_impl<A>(y, b, pre, M, N, ctx); });
}

void bias_activation_backward(const float* dy, const float* saved, float* dpre, float* db,
                              std::int64_t M, std::int64_t N, Activation act, bool accumulate,
                              const Context& ctx) {
  detail::check_nonnegative("bias_activation_backward", M, N);
  check_saved("bias_activation_backward", act, saved);
  if (act != Activation::none && !dpre)
    throw std::invalid_argument("bias_activation_backward (cuda): dpre is null");
  // For none, dpre = dy: a copy only when the caller asked for a separate one.
  float* out = act == Activation::none && dpre == dy ? nullptr : dpre;
  if (N == 0) return;
  detail::use_device(ctx);
  if (M == 0) {  // no rows: the sums are zero
    if (db && !accumulate)
      CODISTILL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * N, detail::stream_of(ctx)));
    return;
  }
  if (!db) {
    if (!out) return;
    with_activation(act, [&]<Activation A>() { act_backward_impl<A>(saved, dy, out, M * N, ctx); });
    return;
  }
  // dpre and the column sums in one pass
  with_activation(act, [&]<Activation A>() { column_sums<A>(dy, saved, out, db, M, N, accumulate, ctx); });
}

void activation_forward(const float* x, float* y, std::int64_t n, Activation act,
                        const Context& ctx) {
  detail::check_nonnegative("activation_forward", n);
  if (n == 0 || (act == Activation::none && x == y)) return;
  detail::use_device(ctx);
  with_activation(act, [&]<Activation A>() { act_forward_impl<A>(x, y, n, ctx); });
}

void activation_backward(const float* saved, const float* dy, float* dx, std::int64_t n,
                         Activation act, const Context& ctx) {
  detail::check_nonnegative("activation_backward", n);
  check_saved("activation_backward", act, saved);
  if (n == 0 || (act == Activation::none && dx == dy)) return;
  detail::use_device(ctx);
  with_activation(act, [&]<Activation A>() { act_backward_impl<A>(saved, dy, dx, n, ctx); });
}

void bias_add_channels(float* y, const float* b, std::int64_t B, std::int64_t C, std::int64_t S,
                       const Context& ctx) {
  detail::check_nonnegative("bias_add_channels", B, C, S);
  const std::int64_t total = B * C * S;
  if (total == 0) return;
  detail::use_device(ctx);
  launch_sized(total, [&](auto tag) {
    using I = decltype(tag);
    CODISTILL_LAUNCH(bias_channels_kernel<I>, shapes::elementwise(total), ctx)(
        y, b, static_cast<I>(total), static_cast<I>(C), static_cast<I>(S));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

void bias_grad_channels(const float* dy, float* db, std::int64_t B, std::int64_t C, std::int64_t S,
                        bool accumulate, const Context& ctx) {
  detail::check_nonnegative("bias_grad_channels", B, C, S);
  if (C == 0) return;
  detail::use_device(ctx);
  if (B == 0 || S == 0) {
    if (!accumulate)
      CODISTILL_CUDA_CHECK(cudaMemsetAsync(db, 0, sizeof(float) * C, stream_of(ctx)));
    return;
  }
  const auto shape = shapes::channel_sums(B, C, S);
  double* partial = nullptr;
  if (shape.chunks > 1)
    partial = static_cast<double*>(detail::stream_workspace(
        ctx, sizeof(double) * static_cast<std::size_t>(shape.chunks * C)));
  CODISTILL_LAUNCH(channel_sum_kernel, shape.sums, ctx)(dy, B, C, S, shape.images, partial, db,
                                                       accumulate);
  CODISTILL_CUDA_LAUNCH_CHECK();
  if (shape.chunks > 1) {
    CODISTILL_LAUNCH(colsum_finish_kernel, shape.finish, ctx)(partial, shape.chunks, C, db,
                                                             accumulate);
    CODISTILL_CUDA_LAUNCH_CHECK();
  }
}

void multiply(const float* x, const float* mask, float* y, std::int64_t n, const Context& ctx) {
  detail::check_nonnegative("multiply", n);
  if (n == 0) return;
  detail::use_device(ctx);
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    CODISTILL_LAUNCH(multiply_kernel<I>, shapes::elementwise(n), ctx)(x, mask, y,
                                                                     static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}

namespace {
// y = act(a + b): the residual add and its fused-relu twin share this launch.
template <Activation A>
void add_act(const float* a, const float* b, float* y, std::int64_t n, const char* what, const Context& ctx) {
  detail::check_nonnegative(what, n);
  if (n == 0) return;
  detail::use_device(ctx);
  launch_sized(n, [&](auto tag) {
    using I = decltype(tag);
    auto* kernel = &add_kernel<I, A>;  // one name for the macro (a comma would split it)
    CODISTILL_LAUNCH(kernel, shapes::elementwise(n), ctx)(a, b, y, static_cast<I>(n));
  });
  CODISTILL_CUDA_LAUNCH_CHECK();
}
}  // namespace

void add(const float* a, const float* b, float* y, std::int64_t n, const Context& ctx) {
  add_act<Activation::none>(a, b, y, n, "add", ctx);
}

void add_relu(const float* a, const float* b, float* y, std::int64_t n, const Context& ctx) {
  add_act<Activation::relu>(a, b, y, n, "add_relu", ctx);
}

// ---- the backend's entry points (kernels/op_list.def): the checks of CudaBackend::enter, then
// the launches above on the queue's stream ----------------------------------------------------

using ops::f32;

void CudaBackend::activation_forward(const Tensor& x, Tensor& y, Activation act,
                                     kernels::Queue& q) {
  const std::int64_t n = x.numel();
  CudaQueue& cq = enter(q, Op::activation, x.dtype(), "activation", {{x, n, "x"}, {y, n, "y"}});
  cuda::activation_forward(f32(x), f32(y), n, act, cq.context());
}

void CudaBackend::activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx,
                                      Activation act, kernels::Queue& q) {
  // none: dx = dy, nothing saved.
  const bool uses_saved = act != Activation::none;
  const std::int64_t n = dy.numel();
  CudaQueue& cq = enter(q, Op::activation, dy.dtype(), "activation backward",
                        {{dy, n, "dy"}, {dx, n, "dx"}, {uses_saved ? &saved : nullptr, n, "saved"}});
  cuda::activation_backward(uses_saved ? f32(saved) : nullptr, f32(dy), f32(dx), n, act,
                            cq.context());
}

void CudaBackend::multiply(const Tensor& x, const Tensor& m, Tensor& y, kernels::Queue& q) {
  const std::int64_t n = x.numel();
  CudaQueue& cq = enter(q, Op::multiply, x.dtype(), "multiply", {{x, n, "x"}, {m, n, "m"}, {y, n, "y"}});
  cuda::multiply(f32(x), f32(m), f32(y), n, cq.context());
}

void CudaBackend::add(const Tensor& a, const Tensor& b, Tensor& y, kernels::Queue& q) {
  const std::int64_t n = a.numel();
  CudaQueue& cq = enter(q, Op::add, a.dtype(), "add", {{a, n, "a"}, {b, n, "b"}, {y, n, "y"}});
  cuda::add(f32(a), f32(b), f32(y), n, cq.context());
}

// relu(a + b) in one pass (Op::add_activation); act must be relu; y may alias a or b.
void CudaBackend::add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, kernels::Queue& q) {
  const char* op = "add+activation";
  CudaQueue& cq = enter(q, Op::add_activation, a.dtype(), op);
  ops::expect_relu(act, op);
  const std::int64_t n = a.numel();
  ops::expect(cq.device(), op, {{a, n, "a"}, {b, n, "b"}, {y, n, "y"}});
  cuda::add_relu(f32(a), f32(b), f32(y), n, cq.context());
}

}  // namespace codistill::kernels::cuda
