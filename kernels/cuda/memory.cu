// Device memory straight from the CUDA runtime. Tensors allocate through the caching
// allocator instead (allocator.cu); device_malloc/device_free stay for callers that want
// memory of their own, outside the cache.
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/memory.hpp"

namespace codistill::kernels::cuda {

namespace {
void set_device(int device) { CODISTILL_CUDA_CHECK(cudaSetDevice(device)); }
}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void* device_malloc(std::size_t bytes, int device) {
  set_device(device);
  void* p = nullptr;
  CODISTILL_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void device_free(void* ptr, int device) noexcept {
  if (!ptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

void memcpy_host_to_device(void* dst, const void* src, std::size_t bytes, int device) {
  set_device(device);
  CODISTILL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void memcpy_device_to_host(void* dst, const void* src, std::size_t bytes, int device) {
  set_device(device);
  CODISTILL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void memcpy_device_to_device(void* dst, const void* src, std::size_t bytes, int device) {
  set_device(device);
  CODISTILL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void memset_zero(void* ptr, std::size_t bytes, int device) {
  set_device(device);
  CODISTILL_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}

void synchronize(int device) {
  set_device(device);
  CODISTILL_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace codistill::kernels::cuda
