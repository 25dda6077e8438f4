// libFuzzer target: the token file reader (codistill/data/text/tokens/token_file.cpp) on arbitrary
// bytes. Every malformed file must end in a std::runtime_error naming the problem, never a
// crash, a read outside the map, a hang or a huge allocation; a file that opens must give
// every document's tokens inside the vocabulary.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "codistill/data/text/tokens/token_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/codistill-fuzz-tokens-" + std::to_string(::getpid());
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    const codistill::data::text::TokenFile file(path);
    for (std::int64_t d = 0; d < file.documents(); ++d)
      for (std::int32_t t : file.document(d))
        if (t < 0 || static_cast<std::uint32_t>(t) >= file.info().vocab_size) std::abort();
  } catch (const std::exception&) {
  }
  return 0;
}
