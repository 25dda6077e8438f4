#include "kernels/tensor.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/backend.hpp"

namespace codistill::kernels {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    n *= d;
  }
  return n;
}


Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  try {
    t.buffer_ = backend_for(device).allocate(t.nbytes(), device.index);
  } catch (const OutOfMemory&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("out of memory: cannot allocate " + human_bytes(t.nbytes()) + " for a " +
                      dtype_name(dtype) + " tensor of shape " + shape_str(t.shape_) + " on " +
                      device.str());
  }
  return t;
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

Tensor Tensor::adopt(std::shared_ptr<std::byte> buffer, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.buffer_ = std::move(buffer);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(std::move(shape), DType::f32);
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(t.shape()));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor Tensor::from_vector(Shape shape, const std::vector<double>& values) {
  Tensor t = empty(std::move(shape), DType::f64);
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(t.shape()));
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

std::int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  if (j < 0 || j >= n)
    throw std::out_of_range("Tensor::dim(" + std::to_string(i) + ") of shape " + shape_str(shape_));
  return shape_[j];
}

template <class T>
T* Tensor::data() {
  if (dtype_ != dtype_of<T>())
    throw std::invalid_argument(std::string("Tensor::data: tensor is ") + dtype_name(dtype_) +
                                ", accessed as " + dtype_name(dtype_of<T>()));
  return reinterpret_cast<T*>(raw());
}

template <class T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

template float* Tensor::data<float>();
template double* Tensor::data<double>();
template std::int32_t* Tensor::data<std::int32_t>();
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const std::int32_t* Tensor::data<std::int32_t>() const;

Tensor Tensor::reshape(Shape shape) const {
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known > 0) shape[infer] = numel_ / known;
  if (shape_numel(shape) != numel_)
    throw std::invalid_argument("reshape: cannot view " + shape_str(shape_) + " as " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(std::int64_t offset, Shape shape) const {
  const std::int64_t n = shape_numel(shape);
  if (offset < 0 || offset + n > numel_)
    throw std::out_of_range("Tensor::view: elements [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") of a tensor of " + std::to_string(numel_));
  Tensor t = *this;
  // Aliasing constructor: shares ownership of the whole buffer, points into it.
  t.buffer_ = std::shared_ptr<std::byte>(buffer_, buffer_.get() + offset * static_cast<std::int64_t>(dtype_size(dtype_)));
  t.shape_ = std::move(shape);
  t.numel_ = n;
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (!device_.is_cpu()) throw std::invalid_argument("Tensor::to(dtype): only on the CPU");
  Tensor t = empty(shape_, dtype);
  dispatch_floating(dtype_, [&]<class S>() {
    dispatch_floating(dtype, [&]<class D>() {
      const S* src = data<S>();
      D* dst = t.data<D>();
      for (std::int64_t i = 0; i < numel_; ++i) dst[i] = static_cast<D>(src[i]);
    });
  });
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel_ != numel_ || src.dtype_ != dtype_)
    throw std::invalid_argument("Tensor::copy_from: " + shape_str(src.shape_) + " " +
                                dtype_name(src.dtype_) + " into " + shape_str(shape_) + " " +
                                dtype_name(dtype_));
  if (nbytes() == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memcpy(raw(), src.raw(), nbytes());
    return;
  }
  // The backend of whichever side is not the CPU copies (and waits for its device).
  backend_for(device_.is_cpu() ? src.device_ : device_).copy_sync(*this, src);
}

void Tensor::fill(double value) {
  if (!device_.is_cpu()) throw std::invalid_argument("Tensor::fill: only on the CPU");
  dispatch_floating(dtype_, [&]<class T>() { std::fill_n(data<T>(), numel_, static_cast<T>(value)); });
}

void Tensor::zero() {
  if (nbytes() == 0) return;
  backend_for(device_).zero_sync(*this);
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() != expected)
    throw std::invalid_argument(std::string(what) + ": expected shape " + shape_str(expected) +
                                ", got " + shape_str(t.shape()));
}

}  // namespace codistill::kernels
