#include "kernels/device.hpp"

#include "kernels/backend.hpp"

#include <charconv>
#include <stdexcept>

namespace codistill::kernels {

Device Device::parse(std::string_view text) {
  // The spellings come from the registry: "<backend>" (device 0) or "<backend>:K". Whether
  // such a device exists here is the caller's question (Backend::device_count).
  std::string valid;
  for (const Backend* b : backends()) {
    const std::string_view name = b->name();
    valid += (valid.empty() ? "" : ", ") + std::string(name);
    if (b->kind() != DeviceKind::cpu) valid += ", " + std::string(name) + ":K with K >= 0";
    if (text == name) return {b->kind(), 0};
    if (b->kind() == DeviceKind::cpu || !text.starts_with(name) || text.size() <= name.size() + 1 ||
        text[name.size()] != ':')
      continue;
    std::string_view num = text.substr(name.size() + 1);
    int index = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && ptr == num.data() + num.size() && index >= 0) return {b->kind(), index};
  }
  throw std::invalid_argument("unknown device '" + std::string(text) + "' (valid: " + valid + ")");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace codistill::kernels
