#pragma once
// The CPU backend's class (kernels/cpu/backend.cpp: memory, queues, threads, supports()).
// Each op's entry points are defined at the end of that op's file, kernels/cpu/<op>.cpp,
// beside its reference and fast path (convolution's in dnnl_conv.cpp, which picks oneDNN or
// conv2d.cpp's im2col). Internal to kernels/cpu/: the rest of the code sees only
// kernels::Backend through cpu_backend() (kernels/cpu/backend.hpp).
#include <cstddef>
#include <memory>
#include <string>

#include "kernels/backend.hpp"

namespace codistill::kernels::cpu {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  int device_count() const override { return 1; }
  using Backend::supports;  // (op, dtype, compute) as well: every op computes in both here
  bool supports(Op op, DType dtype) const override;  // the cpu column of kernels/op_list.def
  bool supports_compute(Compute /*c*/) const override { return true; }
  bool supports_channels_last() const override { return true; }
  void set_threads(int n) override;
  int threads() const override;

  std::shared_ptr<std::byte> allocate(std::size_t bytes, int device) override;
  // Device memory is host memory: the tensor is its own staging area.
  Tensor staging_for(const Tensor& device_tensor) override { return device_tensor; }
  void copy_sync(Tensor& dst, const Tensor& src) override { dst.copy_from(src); }
  // oneDNN's scratchpad and blocked copies (image/dnnl_conv.hpp) on the fast path.
  std::vector<std::int64_t> conv2d_workspace(const Conv2dShape& s, bool bias, bool backward, Queue& q) override;
  void zero_sync(Tensor& t) override;
  std::unique_ptr<Queue> make_queue(Device device, QueueOptions options) override;

  // The op entry points of kernels/op_list.def.
#define CODISTILL_ENTRY(ret, name, params) ret name params override;
#define CODISTILL_OPTIONAL_ENTRY(ret, name, params, cpu, cuda) CODISTILL_IF_##cpu(ret name params override;)
#include "kernels/op_list.def"
};

}  // namespace codistill::kernels::cpu
