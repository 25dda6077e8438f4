// Token shards (data.kind tokens): llm.c files written here and byte by byte, headerless
// nanoGPT files, the errors for every malformed one, the vocabulary check, and shards read
// back to back as one stream.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "codistill/data/text/tokens/token_shard.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"

using namespace codistill::data::text;
namespace fs = std::filesystem;

namespace {

void put_bytes(const fs::path& p, const void* data, std::size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// An llm.c file with the header words given and `payload` after it.
void put_llmc(const fs::path& p, std::int32_t version, std::int32_t count, const std::vector<std::uint8_t>& payload) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = kLlmcMagic;
  header[1] = version;
  header[2] = count;
  std::vector<std::uint8_t> bytes(kLlmcHeaderBytes);
  std::memcpy(bytes.data(), header.data(), kLlmcHeaderBytes);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  put_bytes(p, bytes.data(), bytes.size());
}

std::vector<std::int32_t> all_tokens(const TokenShard& s) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(s.size()));
  s.copy(0, s.size(), out.data());
  return out;
}

}  // namespace

TEST_CASE("llm.c shards round-trip at 16 and 32 bits, headerless files read with their width", "[data][tokens]") {
  codistill::test::TempDir dir;
  const std::vector<std::int32_t> narrow = {50256, 0, 7, 65535, 12};
  write_llmc_shard(dir.str("a.bin"), narrow);
  const TokenShard a(dir.str("a.bin"), 0);
  CHECK(a.format() == ShardFormat::llmc);
  CHECK(a.token_bytes() == 2);
  CHECK(fs::file_size(dir.str("a.bin")) == kLlmcHeaderBytes + 2 * narrow.size());
  CHECK(all_tokens(a) == narrow);
  CHECK(a.max_token() == 65535);
  CHECK(TokenShard(dir.str("a.bin"), 2).size() == 5);  // a width that agrees is fine

  const std::vector<std::int32_t> wide = {128000, 3, 200000};
  write_llmc_shard(dir.str("b.bin"), wide);
  const TokenShard b(dir.str("b.bin"), 0);
  CHECK(b.token_bytes() == 4);
  CHECK(all_tokens(b) == wide);

  const std::vector<std::uint16_t> raw16 = {1, 2, 60000};
  put_bytes(dir.path() / "c.bin", raw16.data(), 6);
  CHECK(all_tokens(TokenShard(dir.str("c.bin"), 2)) == std::vector<std::int32_t>{1, 2, 60000});
  const std::vector<std::uint32_t> raw32 = {70000, 5};
  put_bytes(dir.path() / "d.bin", raw32.data(), 8);
  CHECK(all_tokens(TokenShard(dir.str("d.bin"), 4)) == std::vector<std::int32_t>{70000, 5});
}

TEST_CASE("malformed token shards are errors naming the file and the problem", "[data][tokens]") {
  codistill::test::TempDir dir;
  const std::vector<std::uint8_t> four(4, 1);
  put_llmc(dir.path() / "v3.bin", 3, 2, four);
  CHECK_THROWS_WITH(TokenShard(dir.str("v3.bin"), 0), Catch::Contains("v3.bin: llm.c shard of version 3"));
  put_llmc(dir.path() / "short.bin", 1, 3, four);
  CHECK_THROWS_WITH(TokenShard(dir.str("short.bin"), 0),
                    Catch::Contains("short.bin: llm.c header announces 3 tokens") && Catch::Contains("truncated"));
  put_llmc(dir.path() / "long.bin", 1, 1, four);
  CHECK_THROWS_WITH(TokenShard(dir.str("long.bin"), 0), Catch::Contains("trailing bytes"));
  put_llmc(dir.path() / "odd.bin", 2, 1, std::vector<std::uint8_t>(5, 0));
  CHECK_THROWS_WITH(TokenShard(dir.str("odd.bin"), 0), Catch::Contains("llm.c header announces 1 tokens"));
  put_llmc(dir.path() / "neg.bin", 1, -1, {});
  CHECK_THROWS_WITH(TokenShard(dir.str("neg.bin"), 0), Catch::Contains("announces -1 tokens"));
  put_llmc(dir.path() / "ok.bin", 1, 2, four);
  CHECK_THROWS_WITH(TokenShard(dir.str("ok.bin"), 4),
                    Catch::Contains("data.token_dtype says 32-bit tokens but this llm.c shard (version 1) holds 16-bit"));
  put_bytes(dir.path() / "raw.bin", four.data(), 3);
  CHECK_THROWS_WITH(TokenShard(dir.str("raw.bin"), 0),
                    Catch::Contains("raw.bin: no llm.c header") && Catch::Contains("needs data.token_dtype"));
  CHECK_THROWS_WITH(TokenShard(dir.str("raw.bin"), 2), Catch::Contains("3 bytes is not a whole number of 16-bit"));
  CHECK_THROWS_WITH(TokenShard(dir.str("missing.bin"), 2), Catch::Contains("missing.bin: open failed"));
  CHECK_THROWS_AS(write_llmc_shard(dir.str("bad.bin"), std::vector<std::int32_t>{1, -2}), std::invalid_argument);
  CHECK_FALSE(fs::exists(dir.path() / "bad.bin"));
}

TEST_CASE("every token is checked against the vocabulary, the first outside named by offset", "[data][tokens]") {
  codistill::test::TempDir dir;
  std::vector<std::int32_t> t(1000);
  std::iota(t.begin(), t.end(), 0);
  t[700] = 5000;
  t[900] = 6000;
  write_llmc_shard(dir.str("s.bin"), t);
  const TokenShard s(dir.str("s.bin"), 0);
  CHECK_NOTHROW(s.check_vocab(6001));
  CHECK_THROWS_WITH(s.check_vocab(6000), Catch::Contains("s.bin: token 6000 at offset 900") &&
                                             Catch::Contains("outside the vocabulary of 6000 (model.vocab_size)"));
  CHECK_THROWS_WITH(s.check_vocab(1000), Catch::Contains("token 5000 at offset 700"));
}

TEST_CASE("shards read back to back: windows across files, describe and bounds", "[data][tokens]") {
  codistill::test::TempDir dir;
  write_llmc_shard(dir.str("0.bin"), std::vector<std::int32_t>{0, 1, 2});
  write_llmc_shard(dir.str("1.bin"), std::vector<std::int32_t>{});
  write_llmc_shard(dir.str("2.bin"), std::vector<std::int32_t>{3, 4, 5, 6});
  const TokenShard s0(dir.str("0.bin"), 0), s1(dir.str("1.bin"), 0), s2(dir.str("2.bin"), 0);
  const ShardStream st({&s0, &s1, &s2}, 5);
  CHECK(st.size() == 7);
  CHECK(st.describe() == "3 of 5 shards, 7 tokens");
  CHECK(st.origin().find("0.bin and 2 more") != std::string::npos);
  for (std::int64_t begin = 0; begin < 7; ++begin)
    for (std::int64_t n = 0; begin + n <= 7; ++n) {
      std::vector<std::int32_t> out(static_cast<std::size_t>(n), -1);
      st.copy(begin, out);
      for (std::int64_t i = 0; i < n; ++i) CHECK(out[static_cast<std::size_t>(i)] == begin + i);
    }
  std::vector<std::int32_t> two(2);
  CHECK_THROWS_AS(st.copy(6, two), std::out_of_range);
  CHECK_THROWS_AS(st.copy(-1, two), std::out_of_range);
}
