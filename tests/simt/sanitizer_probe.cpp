// Proof that the sanitizer build sees what a GPU would fault on (run by
// scripts/run_sanitized_suite.sh, which expects each mode to be caught):
//   overflow   a kernel reads one element past the end of a DeviceBuffer (ASan)
//   misaligned a kernel dereferences a misaligned float4* without a cache hint (UBSan)
//   shared     a kernel writes past the end of its dynamic shared memory (ASan)
#include <cstring>
#include <iostream>

#include "simt/cuda_shim.hpp"
#include "simt/executor.hpp"

namespace {
__global__ void read_past_end(const float* in, float* out, int n) {
  out[threadIdx.x] = in[threadIdx.x + (threadIdx.x == 31 ? n - 31 : 0)];
}
__global__ void misaligned_vector(const float* in, float* out) {
  out[0] = reinterpret_cast<const float4*>(in)->y;
}
__global__ void shared_overrun(float* out) {
  float* s = static_cast<float*>(simt::dynamic_shared());
  s[threadIdx.x + 1] = 1.0f;  // 32 floats of shared memory, the last thread writes the 33rd
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}
}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  simt::DeviceBuffer<float> in(32), out(32), skewed(8, 4);
  if (!std::strcmp(mode, "overflow")) simt::launch(read_past_end, {1, 32}, in.data(), out.data(), 32);
  else if (!std::strcmp(mode, "misaligned")) simt::launch(misaligned_vector, {1, 1}, skewed.data(), out.data());
  else if (!std::strcmp(mode, "shared")) simt::launch(shared_overrun, {1, 32, 32 * sizeof(float)}, out.data());
  else {
    std::cerr << "usage: sanitizer_probe overflow|misaligned|shared\n";
    return 2;
  }
  std::cout << "not caught: " << mode << "\n";
  return 0;
}
