// The token file format v1: round trips at both token widths, every kind of damage
// rejected with a message that starts with the path and says what is wrong, the tokenizer
// check, and atomic writing.
#include <catch2/catch.hpp>

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "codistill/data/text/atomic_write.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "support/process.hpp"
#include "support/test_util.hpp"
#include "codistill/data/text/text_test_util.hpp"

using namespace codistill;
using namespace codistill::data::text;
using codistill::test::text::read_bytes;
using codistill::test::text::write_bytes;
namespace fs = std::filesystem;

namespace {

TokenDocuments sample_documents(std::int32_t vocab, Rng& rng) {
  TokenDocuments docs;
  for (std::int64_t d = 0; d < 7; ++d) {
    std::vector<std::int32_t> t(d == 3 ? 0 : 1 + rng.below(50));  // document 3 is empty
    for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
    docs.add(t);
  }
  return docs;
}

template <class T>
void put(std::string& bytes, std::size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

// Recomputes the stored digests so that a test can reach the checks behind them.
void fix_digests(std::string& b, bool payload) {
  if (payload) put(b, 48, static_cast<std::uint64_t>(XXH64(b.data() + 64, b.size() - 64, 0)));
  put(b, 56, static_cast<std::uint64_t>(XXH64(b.data(), 56, 0)));
}

}  // namespace

TEST_CASE("token files round-trip at 2 and 4 bytes per token", "[text][token_file]") {
  codistill::test::TempDir dir;
  Rng rng(test::fresh_seed());
  for (std::int32_t vocab : {300, 65536, 70000}) {
    INFO("vocab " << vocab);
    const TokenDocuments docs = sample_documents(vocab, rng);
    const std::string path = dir.str("split.tokens");
    const TokenFileInfo written = write_token_file(path, docs, static_cast<std::uint32_t>(vocab), 0xABCDEF);
    const TokenFile f(path);
    CHECK(f.info().token_bytes == (vocab <= 65536 ? 2u : 4u));
    CHECK(f.info().vocab_size == static_cast<std::uint32_t>(vocab));
    CHECK(f.info().tokenizer_digest == 0xABCDEFu);
    CHECK(f.info().payload_digest == written.payload_digest);
    REQUIRE(f.documents() == 7);
    CHECK(f.tokens() == static_cast<std::int64_t>(docs.tokens.size()));
    CHECK(f.file_bytes() == static_cast<std::int64_t>(64 + 8 * 8 + f.info().token_bytes * docs.tokens.size()));
    CHECK(f.document_size(3) == 0);
    for (std::int64_t d = 0; d < 7; ++d) {
      const std::vector<std::int32_t> want(docs.tokens.begin() + static_cast<std::ptrdiff_t>(docs.offsets[d]),
                                           docs.tokens.begin() + static_cast<std::ptrdiff_t>(docs.offsets[d + 1]));
      CHECK(f.document(d) == want);
    }
    CHECK_NOTHROW(f.require_tokenizer(0xABCDEF, "t.bpe"));
    CHECK_THROWS_WITH(f.require_tokenizer(0x1234, "t.bpe"),
                      Catch::StartsWith(path) && Catch::Contains("another tokenizer") && Catch::Contains("t.bpe"));
  }
  // No documents at all is a valid (empty) split.
  write_token_file(dir.str("empty.tokens"), TokenDocuments{}, 8192, 1);
  CHECK(TokenFile(dir.str("empty.tokens")).documents() == 0);
  // The writer refuses tokens outside the vocabulary.
  TokenDocuments bad;
  bad.add(std::vector<std::int32_t>{1, 300});
  CHECK_THROWS_WITH(write_token_file(dir.str("bad.tokens"), bad, 300, 1), Catch::Contains("token 300 at position 1"));
  CHECK_FALSE(fs::exists(dir.str("bad.tokens")));
}

TEST_CASE("every kind of damaged token file is rejected with what is wrong", "[text][token_file]") {
  codistill::test::TempDir dir;
  Rng rng(test::fresh_seed());
  const std::string good_path = dir.str("good.tokens");
  write_token_file(good_path, sample_documents(300, rng), 300, 7);
  const std::string good = read_bytes(good_path);
  const std::string path = dir.str("damaged.tokens");
  auto rejects = [&](const std::string& bytes, const std::string& expected) {
    INFO(expected);
    write_bytes(path, bytes);
    CHECK_THROWS_WITH(TokenFile(path), Catch::StartsWith(path + ": ") && Catch::Contains(expected));
  };
  rejects("", "too short to be a token file (0 bytes)");
  rejects("CDTOK", "too short");
  rejects("not a token file at all, no", "bad magic");
  rejects(good.substr(0, 40), "truncated header: 40 bytes");
  std::string b = good;
  put<std::uint32_t>(b, 8, 2);
  rejects(b, "format version 2, this program reads version 1");
  b = good;
  b[24] ^= 1;  // the document count, digest left alone
  rejects(b, "header checksum mismatch");
  b = good;
  put<std::uint32_t>(b, 12, 4);
  fix_digests(b, false);
  rejects(b, "token width 4 bytes does not match vocab_size 300");
  b = good;
  put<std::uint32_t>(b, 16, 100);
  fix_digests(b, false);
  rejects(b, "vocab_size 100 is below 257");
  b = good;
  put<std::uint32_t>(b, 20, 300);
  fix_digests(b, false);
  rejects(b, "end-of-document token 300 is outside the vocabulary [0, 300)");
  rejects(good.substr(0, good.size() - 1), "size mismatch");
  rejects(good.substr(0, good.size() - 1), "(truncated?)");
  rejects(good + "xy", "(trailing bytes?)");
  b = good;
  put<std::uint64_t>(b, 24, std::uint64_t{1} << 61);
  fix_digests(b, false);
  rejects(b, "offsets table alone exceeds");
  b = good;
  put<std::uint64_t>(b, 32, ~std::uint64_t{0});
  fix_digests(b, false);
  rejects(b, "size mismatch");
  b = good;
  b[b.size() - 1] ^= 0x40;  // a token's byte
  rejects(b, "payload checksum mismatch");
  b = good;
  put<std::uint64_t>(b, 64 + 8, 1000);  // document 1 starts past the end
  fix_digests(b, true);
  rejects(b, "document offset 1 is 1000");
  b = good;
  put<std::uint64_t>(b, 64, 1);
  fix_digests(b, true);
  rejects(b, "the first document offset is 1");
  b = good;
  const std::size_t tokens_at = 64 + 8 * 8;
  put<std::uint16_t>(b, tokens_at + 2, 300);
  fix_digests(b, true);
  rejects(b, "token 300 at position 1 is outside the vocabulary [0, 300)");
  CHECK_THROWS_WITH(TokenFile(dir.str("missing.tokens")), Catch::Contains("missing.tokens: open failed"));
  CHECK_THROWS_WITH(TokenFile(dir.str("")), Catch::Contains("not a regular file"));
  CHECK_NOTHROW(TokenFile(good_path));
}

TEST_CASE("an interrupted write leaves the old file and no temp file", "[text][token_file]") {
  codistill::test::TempDir dir;
  const std::string path = dir.str("out.bin");
  write_file_atomically(path, [](const ByteSink& sink) { sink("old", 3); });
  CHECK(read_bytes(path) == "old");
  CHECK_THROWS_WITH(write_file_atomically(path,
                                          [](const ByteSink& sink) {
                                            sink("new content", 11);
                                            throw std::runtime_error("killed");
                                          }),
                    "killed");
  CHECK(read_bytes(path) == "old");
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
  CHECK_THROWS_WITH(write_file_atomically(dir.str("no/such/folder/x"), [](const ByteSink&) {}),
                    Catch::Contains("open failed"));
}
