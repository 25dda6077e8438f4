// The CPU backend's memory (kernels/cpu/backend.cpp): large tensors are pages of their own,
// given back when freed, so that the resident set follows the live tensors (the memory
// plan counts those); the scratch a convolution takes is reported per slot
// (Backend::conv2d_workspace), as the memory plan sums it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <fstream>

#include <unistd.h>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

using namespace codistill::kernels;

namespace {

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

TEST_CASE("cpu memory: large tensors' pages go back to the system when they are freed", "[memory]") {
  // glibc's mmap threshold follows the largest block freed (up to 32 MiB): after this one,
  // blocks of 8 MiB would come from malloc's heap, where the small blocks kept alive between
  // them pin the holes they leave.
  void* volatile raise = std::malloc(30 << 20);  // volatile: the pair is not optimized away
  std::free(raise);
  const std::int64_t before = resident_bytes();
  REQUIRE(before > 0);
  std::vector<void*> pins;
  {
    std::vector<Tensor> tensors;
    for (int i = 0; i < 16; ++i) {
      tensors.push_back(Tensor::empty({2 << 20}, DType::f32, Device::cpu()));  // 8 MiB
      std::memset(tensors.back().raw(), 1, tensors.back().nbytes());            // touched: resident
      CHECK(reinterpret_cast<std::uintptr_t>(tensors.back().raw()) % 64 == 0);
      pins.push_back(std::malloc(4096));
      std::memset(pins.back(), 1, 4096);
    }
    CHECK(resident_bytes() >= before + (120 << 20));
  }
  CHECK(resident_bytes() < before + (16 << 20));
  for (void* p : pins) std::free(p);
  // Small tensors keep the 64-byte alignment of the heap path.
  Tensor small = Tensor::empty({3}, DType::f32, Device::cpu());
  CHECK(reinterpret_cast<std::uintptr_t>(small.raw()) % 64 == 0);
}

TEST_CASE("cpu memory: a convolution's scratch per slot, larger with the batch, none on the reference queue",
          "[memory]") {
  Backend& cpu = backend_for(Device::cpu());
  Conv2dShape s{};
  s.batch = 8, s.in_channels = 3, s.height = 16, s.width = 16, s.out_channels = 16;
  s.kernel_h = s.kernel_w = 3, s.stride_h = s.stride_w = 1, s.pad_h = s.pad_w = 1;
  auto q = cpu.make_queue(Device::cpu(), {});
  const auto forward = cpu.conv2d_workspace(s, true, false, *q);
  const auto both = cpu.conv2d_workspace(s, true, true, *q);
  REQUIRE(!forward.empty());
  REQUIRE(both.size() == forward.size());
  for (std::size_t i = 0; i < both.size(); ++i) CHECK(both[i] >= forward[i]);
  Conv2dShape big = s;
  big.batch = 512;
  std::int64_t small_sum = 0, big_sum = 0;
  for (auto b : cpu.conv2d_workspace(s, true, true, *q)) small_sum += b;
  for (auto b : cpu.conv2d_workspace(big, true, true, *q)) big_sum += b;
  CHECK(big_sum >= small_sum);
  QueueOptions reference;
  reference.reference = true;
  auto rq = cpu.make_queue(Device::cpu(), reference);
  CHECK(cpu.conv2d_workspace(s, true, true, *rq).empty());
  CHECK_FALSE(cpu.device_memory(0).has_value());  // host memory: the host's numbers apply
}
