// The CPU backend (kernels/cpu/backend_impl.hpp): host memory, synchronous queues, the
// OpenMP team; each op's entry points are at the end of its kernels/cpu/<op>.cpp.
#include "kernels/cpu/backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

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

std::shared_ptr<std::byte> CpuBackend::allocate(std::size_t bytes, int /*device*/) {
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
