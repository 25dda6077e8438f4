// CPU-only build: the device entry points exist and say clearly why they cannot work.
#include <stdexcept>

#include "kernels/cuda/distill_loss.hpp"
#include "kernels/cuda/memory.hpp"

namespace codistill::kernels::cuda {

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("codistill was built without CUDA: this build has no CUDA backend "
                           "(configure with CODISTILL_CUDA=ON on a machine with nvcc)");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
void* device_malloc(std::size_t, int) { no_cuda(); }
void device_free(void*, int) noexcept {}
void memcpy_host_to_device(void*, const void*, std::size_t, int) { no_cuda(); }
void memcpy_device_to_host(void*, const void*, std::size_t, int) { no_cuda(); }
void memcpy_device_to_device(void*, const void*, std::size_t, int) { no_cuda(); }
void memset_zero(void*, std::size_t, int) { no_cuda(); }
void synchronize(int) { no_cuda(); }

cpu::DistillLossResult distill_loss(const float*, const float* const*, int, const std::int32_t*,
                                    float*, std::int64_t, std::int64_t,
                                    const cpu::DistillLossParams&, int, void*) {
  no_cuda();
}

}  // namespace codistill::kernels::cuda
