#pragma once
// What the CUDA backend's op entry points (the end of each kernels/cuda/<op>.cu) share: the
// argument check that keeps a bad call from handing a kernel memory it cannot address
// (CudaBackend::enter runs it), and float32 views. Each entry checks the queue is this
// backend's, every tensor is on the queue's device, in the dtype and with the element count
// the kernel reads; shapes beyond element counts are the layers' to validate. Gradients
// accumulate (accumulate = true): zeroing is the caller's Queue::zero.
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/backend_impl.cuh"

namespace codistill::kernels::cuda::ops {

// Throws std::invalid_argument("<op> (cuda): <name> is <shape dtype device>, expected ...")
// unless t holds `numel` elements of `dtype` on `device`.
inline void expect(const Tensor& t, Device device, DType dtype, std::int64_t numel, const char* op,
                   const char* name) {
  if (t.device() == device && t.dtype() == dtype && t.numel() == numel && (numel == 0 || t.raw()))
    return;
  throw std::invalid_argument(std::string(op) + " (cuda): " + name + " is " +
                              shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " +
                              t.device().str() + ", expected " + std::to_string(numel) + " " +
                              dtype_name(dtype) + " elements on " + device.str());
}

// Each of args that is set, in order (CudaBackend::enter's last step).
inline void expect(Device device, const char* op, std::initializer_list<TensorArg> args) {
  for (const TensorArg& a : args)
    if (a.tensor) expect(*a.tensor, device, a.dtype, a.numel, op, a.name);
}

// The one activation the fused pairs take (Op::batchnorm_activation, Op::add_activation), as
// the CPU backend: throws std::invalid_argument("<op> (cuda): the fused activation must be
// relu, got <act>") otherwise.
inline void expect_relu(Activation act, const char* op) {
  if (act != Activation::relu)
    throw std::invalid_argument(std::string(op) + " (cuda): the fused activation must be relu, got " +
                                activation_name(act));
}

inline const float* f32(const Tensor& t) { return static_cast<const float*>(t.raw()); }
inline float* f32(Tensor& t) { return static_cast<float*>(t.raw()); }
inline const float* f32(const Tensor* t) { return t ? f32(*t) : nullptr; }
inline float* f32(Tensor* t) { return t ? f32(*t) : nullptr; }

}  // namespace codistill::kernels::cuda::ops
