#pragma once
// Helpers of the [cuda] tests: the skip convention, device copies of host vectors, and
// bf16 conversions. No CUDA header here: these tests build (and skip) in CPU-only builds.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <vector>

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/memory.hpp"
#include "support/test_util.hpp"

namespace codistill::test {

namespace cuda = codistill::kernels::cuda;

// True (after printing the line CTest reads as "skipped") when there is no CUDA device.
inline bool no_cuda_device() {
  if (cuda::device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("skipped: no CUDA device");
  return true;
}

// A device copy of a host vector on device 0, freed on scope exit. Uploads and downloads
// are synchronous on the legacy stream, which does not order work on non-blocking streams:
// the constructor waits for the whole device (a pageable cudaMemcpy may return before its
// DMA ends), and results computed on a Stream must be synchronized before host().
// offset shifts the data by that many elements past an aligned allocation (to exercise
// the unaligned paths).
template <class T>
struct DeviceVec {
  std::size_t n, offset;
  T* base;
  T* ptr;
  explicit DeviceVec(const std::vector<T>& host, std::size_t off = 0)
      : n(host.size()),
        offset(off),
        base(static_cast<T*>(cuda::device_malloc((n + off) * sizeof(T), 0))),
        ptr(base + off) {
    cuda::memcpy_host_to_device(ptr, host.data(), n * sizeof(T), 0);
    cuda::synchronize(0);
  }
  ~DeviceVec() { cuda::device_free(base, 0); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  std::vector<T> host() const {
    std::vector<T> out(n);
    cuda::memcpy_device_to_host(out.data(), ptr, n * sizeof(T), 0);
    return out;
  }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n);
    cuda::memcpy_host_to_device(ptr, host.data(), n * sizeof(T), 0);
    cuda::synchronize(0);
  }
};

inline bool all_nan(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return true;
}

// bfloat16 as raw bits: the upper half of a float, rounded to nearest even.
inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<std::uint16_t>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_bf16(v[i]);
  return out;
}

}  // namespace codistill::test
