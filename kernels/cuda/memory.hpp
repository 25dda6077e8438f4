#pragma once
// Device memory and transfers, with no CUDA type in sight: callers outside kernels/cuda/
// include this header only. Every function throws std::runtime_error carrying file,
// line and the CUDA message on failure, and "built without CUDA" in a CPU-only build.
#include <cstddef>

namespace codistill::kernels::cuda {

bool built_with_cuda();
int device_count();  // 0 when no driver or no device; never throws
void* device_malloc(std::size_t bytes, int device);
void device_free(void* ptr, int device) noexcept;
void memcpy_host_to_device(void* dst, const void* src, std::size_t bytes, int device);
void memcpy_device_to_host(void* dst, const void* src, std::size_t bytes, int device);
void memcpy_device_to_device(void* dst, const void* src, std::size_t bytes, int device);
void memset_zero(void* ptr, std::size_t bytes, int device);
void synchronize(int device);

}  // namespace codistill::kernels::cuda
