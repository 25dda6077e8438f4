#pragma once
// Small RAII owners and stream-ordered copies for the CUDA path of the library, over the
// CUDA-free API of kernels/cuda/ (no CUDA type here either).
//
// Ordering rule of this library: everything a model does on CUDA runs on its own
// non-blocking stream (Layer/Model::cuda_context). kernels::Tensor's own copy_from, zero and
// to() run on the legacy default stream, which is NOT ordered with non-blocking streams, so
// in the hot path tensors move only with copy_async below, and the set-up paths that do use
// Tensor's copies (moving a model, creating optimizer slots, restoring a checkpoint) end
// with fence(), which waits for the whole device.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/context.hpp"
#include "kernels/device.hpp"
#include "kernels/tensor.hpp"

namespace codistill {

// Page-locked host memory (kernels::cuda::pinned_malloc): what an asynchronous host<->device
// copy needs. Empty by default; never allocates in a CPU-only build unless asked to (which
// throws "built without CUDA").
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Grows to at least `bytes` (contents are not kept).
  void reserve(std::size_t bytes);
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  template <class T> T* as() { return static_cast<T*>(ptr_); }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Raw device memory for what kernels::Tensor cannot hold (int32 labels).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return ptr_; }
  template <class T> T* as() { return static_cast<T*>(ptr_); }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

// dst <- src (same numel and dtype, at least one of them on CUDA) as a copy queued on
// ctx's stream: ordered with the kernels on that stream. A pageable host side makes the
// copy synchronous for the host but it stays stream-ordered; pinned host memory makes it
// asynchronous.
void copy_async(kernels::Tensor& dst, const kernels::Tensor& src, const kernels::cuda::Context& ctx);

// host <- device, reallocating host as a CPU tensor when its shape or dtype differs, and
// waits for ctx's stream: host holds the values when this returns.
void copy_to_host(const kernels::Tensor& device_tensor, kernels::Tensor& host,
                  const kernels::cuda::Context& ctx);

// Waits for all work on a CUDA device, every stream included; nothing on the CPU. For the
// set-up paths that used legacy-stream copies (see the top of this file).
void fence(kernels::Device device);

}  // namespace codistill
