// libFuzzer target: the token shard reader (codistill/data/text/tokens/token_shard.cpp) on arbitrary
// bytes, as an llm.c file (header detected) and as a headerless file of 16- and 32-bit
// tokens. Every malformed file must end in a std::runtime_error naming the problem, never a
// crash, a read outside the map or a hang; a file that opens must hold exactly its token
// count, every token readable, and pass or fail the vocabulary check consistently with its
// largest token.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "codistill/data/text/tokens/token_shard.hpp"

using namespace codistill::data::text;

namespace {

void check(const std::string& path, int width) {
  try {
    const TokenShard s(path, width);
    std::vector<std::int32_t> all(static_cast<std::size_t>(s.size()));
    if (s.size() > 0) s.copy(0, s.size(), all.data());
    std::int64_t largest = 0;
    for (std::int32_t t : all) largest = std::max<std::int64_t>(largest, static_cast<std::uint32_t>(t));
    if (s.size() > 0 && s.max_token() != largest) std::abort();
    bool threw = false;
    try {
      s.check_vocab(largest);  // the largest token is outside [0, largest)
    } catch (const std::runtime_error&) {
      threw = true;
    }
    if (s.size() > 0 && !threw) std::abort();
    s.check_vocab(largest + 1);  // must pass
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/codistill-fuzz-shard-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (int width : {0, 2, 4}) check(path, width);
  return 0;
}
