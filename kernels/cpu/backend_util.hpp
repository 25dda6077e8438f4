#pragma once
// Helpers of the CPU backend's op entry points (the end of each kernels/cpu/<op>.cpp):
// argument checks the ops share, the queue's choices (fast or reference path, the bf16 GEMM
// engine) and the activation dispatch. Internal to the backend.
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/backend.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/queue.hpp"

namespace codistill::kernels::cpu::backend_detail {

// The prologue of every op entry point, so that an entry is this call: (op, dtype)
// supported by b (require_support, naming `what`), then fn.template operator()<T>() with T
// float or double as dtype says (dispatch_floating); the entry's own checks go first in fn.
template <class Fn>
decltype(auto) run_op(const Backend& b, Op op, DType dtype, const char* what, Fn&& fn) {
  require_support(b, op, dtype, what);
  return dispatch_floating(dtype, std::forward<Fn>(fn));
}

// The one activation the fused pairs take (Op::batchnorm_activation, Op::add_activation).
inline void check_fused_relu(Activation act, const char* what) {
  if (act != Activation::relu)
    throw std::invalid_argument(std::string(what) + ": the fused activation must be relu, got " +
                                activation_name(act));
}

// Synchronized batchnorm's sums: float64 [2C + 1] (kernels/ops.hpp).
inline void check_sums(const Tensor& sums, const BatchNormShape& s, const char* what) {
  if (sums.dtype() != DType::f64 || sums.numel() != 2 * s.channels + 1)
    throw std::invalid_argument(std::string("synchronized batchnorm: ") + what + " must be float64 [" +
                                std::to_string(2 * s.channels + 1) + "], got " + dtype_name(sums.dtype()) + " " +
                                shape_str(sums.shape()));
}
// The engine of GEMMs computed as `c` on q: null for float32 (the ops' BLAS path).
inline cpu::Bf16Gemm* gemm_engine(Queue& q, Compute c) {
  if (c != Compute::bf16) return nullptr;
  return &cpu::cpu_queue(q, "a bf16 GEMM").bf16_gemm();
}
inline cpu::Bf16Gemm* gemm_engine(Queue& q) { return gemm_engine(q, q.options().compute); }

inline cpu::Impl impl_of(const Queue& q) { return q.options().reference ? cpu::Impl::reference : cpu::Impl::fast; }

template <class T>
const T* opt(const Tensor* t) {
  return t ? t->data<T>() : nullptr;
}
template <class T>
T* opt(Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

template <class T>
void activate(const T* x, T* y, std::int64_t n, Activation act, cpu::Impl impl) {
  if (act == Activation::relu) cpu::relu_forward<T>(x, y, n, impl);
  else if (act == Activation::gelu) cpu::gelu_forward<T>(x, y, n, impl);
  else if (act == Activation::silu) cpu::silu_forward<T>(x, y, n, impl);
  else if (act == Activation::gelu_tanh) cpu::gelu_tanh_forward<T>(x, y, n, impl);
  else if (x != y) std::memcpy(y, x, static_cast<std::size_t>(n) * sizeof(T));
}

template <class T>
void activate_backward(const T* saved, const T* dy, T* dx, std::int64_t n, Activation act, cpu::Impl impl) {
  if (act == Activation::relu) cpu::relu_backward<T>(saved, dy, dx, n, impl);
  else if (act == Activation::gelu) cpu::gelu_backward<T>(saved, dy, dx, n, impl);
  else if (act == Activation::silu) cpu::silu_backward<T>(saved, dy, dx, n, impl);
  else if (act == Activation::gelu_tanh) cpu::gelu_tanh_backward<T>(saved, dy, dx, n, impl);
  else if (dx != dy) std::memcpy(dx, dy, static_cast<std::size_t>(n) * sizeof(T));
}

// The ids of an embedding call: int32, one per row (shapes are the layer's to check; a
// wrong dtype here would read garbage, so it is checked where it is read).
inline void check_ids(const Tensor& ids, const EmbeddingShape& s, const char* op) {
  if (ids.dtype() != DType::i32 || ids.numel() != s.rows)
    throw std::invalid_argument(std::string(op) + " (cpu): ids must be int32 [" + std::to_string(s.rows) + "], got " +
                                dtype_name(ids.dtype()) + " " + shape_str(ids.shape()));
}

}  // namespace codistill::kernels::cpu::backend_detail
