// CPU-only build: the device entry points exist and say clearly why they cannot work: the
// runtime API that code outside kernels/cuda/ reaches (memory.hpp, context.hpp,
// allocator.hpp: the tests of a build without CUDA call them) and the backend, whose op
// entry points come from the op table. The launchers of kernels/cuda/<op>.hpp have no stubs:
// only the backend's .cu files, not built here, call them.
#include <stdexcept>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/backend.hpp"
#include "kernels/cuda/context.hpp"
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

// context.hpp
struct Stream::Impl {};
Stream::Stream(int) { no_cuda(); }
Stream::~Stream() = default;
int Stream::device() const { no_cuda(); }
void* Stream::handle() const { no_cuda(); }
void* Stream::resources() const { no_cuda(); }
void Stream::synchronize() const { no_cuda(); }
struct Event::Impl {};
Event::Event(int) { no_cuda(); }
Event::~Event() = default;
void Event::record(void*) { no_cuda(); }
void Event::wait(void*) const { no_cuda(); }
bool Event::ready() const { no_cuda(); }
void Event::synchronize() const { no_cuda(); }
void stream_synchronize(const Context&) { no_cuda(); }

// allocator.hpp
void* cached_malloc(std::size_t, int) { no_cuda(); }
void cached_free(void*, int) noexcept {}
AllocatorStats allocator_stats(int) { return {}; }
void empty_cache(int) {}
void* pinned_malloc(std::size_t) { no_cuda(); }
void pinned_free(void*) noexcept {}
void memcpy_async(void*, const void*, std::size_t, CopyKind, const Context&) { no_cuda(); }

}  // namespace codistill::kernels::cuda

// backend.hpp: the registry's CUDA entry, with no device and the reason.
namespace codistill::kernels {

namespace {

const char* kNoCuda =
    "this build of codistill has no CUDA backend (configured without CUDA; rebuild with "
    "-DCODISTILL_CUDA=ON where nvcc is installed)";

[[noreturn]] void unavailable() { throw std::runtime_error(kNoCuda); }

class NoCudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::cuda; }
  int device_count() const override { return 0; }
  std::string unavailable_reason() const override { return kNoCuda; }
  bool supports(Op, DType) const override { return false; }
  std::shared_ptr<std::byte> allocate(std::size_t, int) override { unavailable(); }
  Tensor staging_for(const Tensor&) override { unavailable(); }
  void copy_sync(Tensor&, const Tensor&) override { unavailable(); }
  void zero_sync(Tensor&) override { unavailable(); }
  std::unique_ptr<Queue> make_queue(Device, QueueOptions) override { unavailable(); }
  // Every entry point of kernels/op_list.def throws (the optional ones are Backend's
  // defaults, which refuse as supports() does). The stubs keep the table's parameter names.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define CODISTILL_ENTRY(ret, name, params) \
  ret name params override { unavailable(); }
#include "kernels/op_list.def"
#pragma GCC diagnostic pop
};

}  // namespace

Backend& cuda_backend() {
  static NoCudaBackend backend;
  return backend;
}

}  // namespace codistill::kernels
