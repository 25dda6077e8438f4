#pragma once
// Where a tensor's memory lives. Parsed from "cpu", "cuda" or "cuda:K".
#include <string>
#include <string_view>

namespace codistill::kernels {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device&) const = default;

  // Throws std::invalid_argument naming the valid spellings.
  static Device parse(std::string_view text);
  std::string str() const;
};

}  // namespace codistill::kernels
