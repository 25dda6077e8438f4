// The CPU backend (kernels/cpu/backend_impl.hpp): host memory, synchronous queues, the
// OpenMP team; each op's entry points are at the end of its kernels/cpu/<op>.cpp.
#include "kernels/cpu/backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include <sys/mman.h>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/queue.hpp"

namespace codistill::kernels {

namespace cpu {

bool CpuBackend::supports(Op op, DType dtype) const {
  using namespace op_dtypes;  // the table's column spellings
  switch (op) {
#define CODISTILL_OP(id, spelling, cpu, cuda) \
  case Op::id:                                \
    return (cpu).contains(dtype);
#include "kernels/op_list.def"
  }
  return false;
}

void CpuBackend::set_threads(int n) { set_num_threads(n); }
int CpuBackend::threads() const { return num_threads(); }

// Tensors of this size and more are mapped pages of their own, given back to the system
// when freed. Through malloc they would come from its heap once glibc's mmap threshold has
// risen (it follows the largest block freed, up to 32 MiB), and a heap whose holes an
// evaluation's larger batch and training's batch take in turn only grows: ResNet-8's
// resident set rose by 7% over two evaluations. Tensors are allocated when shapes change,
// not per step, so the pages' first-touch cost is paid as often as before.
constexpr std::size_t kMappedTensorBytes = std::size_t{1} << 20;

std::shared_ptr<std::byte> CpuBackend::allocate(std::size_t bytes, int /*device*/) {
  if (bytes >= kMappedTensorBytes) {
    const std::size_t length = (bytes + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return {static_cast<std::byte*>(p), [length](std::byte* q) { ::munmap(q, length); }};
  }
  // 64-byte alignment: whole cache lines and aligned AVX-512 loads.
  const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
}

void CpuBackend::zero_sync(Tensor& t) {
  if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
}

std::unique_ptr<Queue> CpuBackend::make_queue(Device device, QueueOptions options) {
  if (!device.is_cpu()) throw std::invalid_argument("cpu backend: cannot make a queue on " + device.str());
  return std::make_unique<CpuQueue>(*this, options);
}

}  // namespace cpu

Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

}  // namespace codistill::kernels
