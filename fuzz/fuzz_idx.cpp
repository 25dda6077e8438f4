// libFuzzer target: the IDX readers of the datasets (codistill/data/idx.cpp), raw and
// gzip-compressed, on arbitrary bytes. Every malformed file must end in a
// std::runtime_error naming the problem, never a crash, a hang or a huge allocation.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "codistill/data/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/codistill-fuzz-idx-" + std::to_string(::getpid());
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    (void)codistill::data::read_idx_images(path);
  } catch (const std::exception&) {
  }
  try {
    (void)codistill::data::read_idx_labels(path);
  } catch (const std::exception&) {
  }
  return 0;
}
