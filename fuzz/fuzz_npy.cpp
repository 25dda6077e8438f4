// libFuzzer target: the array readers of data.kind arrays on arbitrary bytes. An input that
// starts like a zip archive is read as an .npz (written to a file: minizip reads files),
// every member as an array; any other input is a .npy image. Every malformed input must end
// in a std::runtime_error, never a crash, a read outside the bytes, a hang or a huge
// allocation; an array that opens must have exactly its shape's bytes, all readable.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "codistill/data/npy.hpp"
#include "codistill/data/npz.hpp"

using namespace codistill::data;

namespace {

// Touches the first and the last element, as the loader would (through the view's bounds).
void touch(const RawArray& a) {
  const std::int64_t n = a.numel();
  if (n < 0 || static_cast<std::uint64_t>(n * dtype_bytes(a.dtype)) != a.bytes.size()) std::abort();
  if (n == 0) return;
  for (std::int64_t i : {std::int64_t{0}, n - 1}) {
    if (is_integer(a.dtype)) {
      (void)integer_at(a, i);
    } else {
      float v;
      to_float(a, i, 1, &v);
    }
  }
}

void read_npz(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/codistill-fuzz-npz-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  NpzFile npz(path);
  for (const std::string& key : npz.keys()) {
    try {
      touch(npz.array(key));
    } catch (const std::runtime_error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
      read_npz(data, size);
    } else {
      touch(npy_array({data, size}, nullptr, "fuzz.npy"));
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
