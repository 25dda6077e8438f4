#include "kernels/device.hpp"

#include <charconv>
#include <stdexcept>

namespace codistill::kernels {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && ptr == num.data() + num.size() && index >= 0) return cuda(index);
  }
  throw std::invalid_argument("unknown device '" + std::string(text) +
                              "' (valid: cpu, cuda, cuda:K with K >= 0)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace codistill::kernels
