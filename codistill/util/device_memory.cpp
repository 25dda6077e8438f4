#include "codistill/util/device_memory.hpp"

#include <stdexcept>
#include <utility>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/memory.hpp"

namespace codistill {

namespace cuda = kernels::cuda;

PinnedBuffer::PinnedBuffer(std::size_t bytes) { reserve(bytes); }

PinnedBuffer::~PinnedBuffer() { cuda::pinned_free(ptr_); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    cuda::pinned_free(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_ && ptr_) return;
  cuda::pinned_free(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  ptr_ = cuda::pinned_malloc(bytes == 0 ? 1 : bytes);
  bytes_ = bytes;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device)
    : ptr_(cuda::device_malloc(bytes == 0 ? 1 : bytes, device)), bytes_(bytes), device_(device) {}

DeviceBuffer::~DeviceBuffer() { cuda::device_free(ptr_, device_); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    cuda::device_free(ptr_, device_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void copy_async(kernels::Tensor& dst, const kernels::Tensor& src, const cuda::Context& ctx) {
  if (dst.numel() != src.numel() || dst.dtype() != src.dtype())
    throw std::invalid_argument("copy_async: " + kernels::shape_str(src.shape()) + " " +
                                kernels::dtype_name(src.dtype()) + " into " + kernels::shape_str(dst.shape()) +
                                " " + kernels::dtype_name(dst.dtype()));
  if (dst.nbytes() == 0) return;
  cuda::CopyKind kind;
  if (dst.device().is_cuda() && src.device().is_cuda()) kind = cuda::CopyKind::device_to_device;
  else if (dst.device().is_cuda()) kind = cuda::CopyKind::host_to_device;
  else if (src.device().is_cuda()) kind = cuda::CopyKind::device_to_host;
  else throw std::invalid_argument("copy_async: both tensors are on the CPU");
  cuda::memcpy_async(dst.raw(), src.raw(), dst.nbytes(), kind, ctx);
}

void copy_to_host(const kernels::Tensor& device_tensor, kernels::Tensor& host, const cuda::Context& ctx) {
  if (!host.defined() || host.shape() != device_tensor.shape() || host.dtype() != device_tensor.dtype() ||
      !host.device().is_cpu())
    host = kernels::Tensor::empty(device_tensor.shape(), device_tensor.dtype());
  copy_async(host, device_tensor, ctx);
  cuda::stream_synchronize(ctx);
}

void fence(kernels::Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

}  // namespace codistill
