#pragma once
// Tensor: a shape, a dtype, a device and a reference-counted owning buffer.
// Row-major and contiguous always; views share the buffer (reshape, view) but never stride.
// Memory comes from the backend of the tensor's device (kernels/backend.hpp).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "kernels/dtype.hpp"

namespace codistill::kernels {

using Shape = std::vector<std::int64_t>;

// An allocation the memory cannot hold, saying what it was for (bytes, dtype, shape,
// device). A std::bad_alloc, so callers that handle running out of memory still do.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// "812 B", "1.57 MiB": a size for messages (codistill-inspect prints sizes this way too).
std::string human_bytes(std::uint64_t bytes);

std::string shape_str(const Shape& s);
std::int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;  // empty: numel() == 0, no buffer

  // Uninitialized memory from the device's backend (CPU: 64-byte aligned; CUDA: the
  // caching allocator).
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype = DType::f32);
  static Tensor from_vector(Shape shape, const std::vector<float>& values);
  static Tensor from_vector(Shape shape, const std::vector<double>& values);

  // A tensor over memory a backend allocated (pinned staging, arenas): `buffer` must hold
  // shape's numel elements of dtype on device.
  static Tensor adopt(std::shared_ptr<std::byte> buffer, Shape shape, DType dtype, Device device);

  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const;  // negative i counts from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool defined() const { return static_cast<bool>(buffer_); }
  // How many tensors hold this buffer (views and reshapes included): a pool reuses only a
  // buffer nobody else holds (codistill/nn/buffer_pool.hpp).
  long owners() const { return buffer_.use_count(); }

  void* raw() { return buffer_ ? buffer_.get() : nullptr; }
  const void* raw() const { return buffer_ ? buffer_.get() : nullptr; }
  // Typed access; throws when T does not match the dtype.
  template <class T> T* data();
  template <class T> const T* data() const;

  // Same buffer, new shape of equal numel (one dimension may be -1).
  Tensor reshape(Shape shape) const;
  // The elements [offset, offset + numel(shape)) of this tensor's buffer as a tensor of
  // `shape`, sharing (and keeping alive) the buffer: a named view into an arena.
  Tensor view(std::int64_t offset, Shape shape) const;
  // Whether two tensors start at the same memory (a copy between them is a no-op).
  bool same_memory(const Tensor& other) const { return raw() == other.raw() && device_ == other.device_; }
  // Deep copies.
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;  // CPU only: f32 <-> f64 conversions
  void copy_from(const Tensor& src);  // same numel and dtype, any devices
  void fill(double value);            // CPU only
  void zero();                        // any device (synchronous)

 private:
  std::shared_ptr<std::byte> buffer_;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_{};
};

// Throws std::invalid_argument("<what>: expected shape [..], got [..]") on mismatch.
void check_shape(const Tensor& t, const Shape& expected, const char* what);

}  // namespace codistill::kernels
