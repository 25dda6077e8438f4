// codistill-prepare-text and tokenizer.json end to end: the trained BPE is written as
// tokenizer.json, and preparing again with --tokenizer on that file gives the same token
// files but for the literal text <|endoftext|> (docs/text-data.md); a file it cannot
// reproduce, or --tokenizer with --vocab-size, exits 2 naming why.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokenizer/tokenizer_json.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "support/process.hpp"

using namespace codistill::test;
using namespace codistill::data::text;
namespace fs = std::filesystem;

namespace {

std::string prepare_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-prepare-text"; }

constexpr const char* kSpecial = "<|endoftext|>";

// The docs without the literal end-of-document text, and one document with it (special.txt).
std::string make_corpus(const TempDir& dir) {
  fs::create_directories(dir.path() / "corpus");
  for (const auto& e : fs::directory_iterator(std::string(CODISTILL_SOURCE_DIR) + "/docs")) {
    if (e.path().extension() != ".md") continue;
    std::string text = read_text(e.path());
    for (std::size_t at; (at = text.find(kSpecial)) != std::string::npos;) text.replace(at, 13, "<|end-of-text|>");
    write_text(dir.path() / "corpus" / (e.path().stem().string() + ".txt"), text);
  }
  write_text(dir.path() / "corpus" / "special.txt", std::string("a") + kSpecial + "b");
  return " --corpus " + dir.str("corpus") + " --heldout-fraction 0";
}

// Document d of the training split is special.txt.
bool is_special(const TempDir& dir, const std::string& out, std::int64_t d) {
  const auto manifest = nlohmann::json::parse(read_text(dir.path() / out / "prepare.json"));
  return manifest.at("train_documents").at(static_cast<std::size_t>(d)) == "special.txt";
}

}  // namespace

TEST_CASE("prepare-text --tokenizer on its own tokenizer.json makes the same token files", "[process][text]") {
  TempDir dir;
  const std::string corpus = make_corpus(dir);
  ProcessResult r = run_command(prepare_exe() + corpus + " --out " + dir.str("a") + " --vocab-size 700", dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const Tokenizer tok = Tokenizer::load(dir.str("a/tokenizer.bpe"));
  const BpeModel shared = load_tokenizer_json(dir.str("a/tokenizer.json"));
  CHECK(shared.digest() == tok.digest());
  REQUIRE(shared.as_project_tokenizer());
  CHECK(shared.as_project_tokenizer()->merges() == tok.merges());

  r = run_command(prepare_exe() + corpus + " --out " + dir.str("b") + " --tokenizer " + dir.str("a/tokenizer.json"), dir);
  REQUIRE(r.exit_code == 0);
  for (const char* file : {"tokenizer.bpe", "tokenizer.json"}) CHECK(read_text(dir.path() / "a" / file) == read_text(dir.path() / "b" / file));
  const TokenFile a(dir.str("a/train.tokens")), b(dir.str("b/train.tokens"));
  CHECK(a.info().tokenizer_digest == b.info().tokenizer_digest);
  CHECK(b.info().end_of_document == 256);
  REQUIRE(a.documents() == b.documents());
  for (std::int64_t d = 0; d < a.documents(); ++d) {
    if (!is_special(dir, "a", d)) {
      CHECK(a.document(d) == b.document(d));
      continue;
    }
    // The project's encoder takes the literal as its bytes; tokenizer.json, as `tokenizers`
    // does, as the end-of-document token.
    CHECK(tok.decode(a.document(d)) == std::string("a") + kSpecial + "b");
    CHECK(b.document(d) == std::vector<std::int32_t>{'a', 256, 'b'});
  }
  const auto manifest = nlohmann::json::parse(read_text(dir.path() / "b" / "prepare.json"));
  CHECK(manifest.at("options").at("tokenizer") == fs::absolute(dir.path() / "a" / "tokenizer.json").string());
}

TEST_CASE("prepare-text --tokenizer with a GPT-2-style file writes its ids and its end of document", "[process][text]") {
  TempDir dir;
  // The project's tokenizer.json, renumbered: <|endoftext|> becomes 0 and every other id
  // moves up by one (the bytes 1..256), which the project's own layout cannot express.
  const std::string corpus = make_corpus(dir);
  REQUIRE(run_command(prepare_exe() + corpus + " --out " + dir.str("a") + " --vocab-size 500", dir).exit_code == 0);
  auto j = nlohmann::json::parse(read_text(dir.path() / "a" / "tokenizer.json"));
  for (auto& [token, id] : j["model"]["vocab"].items()) id = token == "<|endoftext|>" ? 0 : id.get<int>() + (id.get<int>() < 256);
  j["added_tokens"][0]["id"] = 0;
  write_text(dir.path() / "renumbered.json", j.dump());
  ProcessResult r = run_command(prepare_exe() + corpus + " --out " + dir.str("b") + " --tokenizer " +
                                    dir.str("renumbered.json") + " --json",
                                dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(fs::exists(dir.path() / "b" / "tokenizer.bpe"));
  const BpeModel model = load_tokenizer_json(dir.str("b/tokenizer.json"));
  const TokenFile a(dir.str("a/train.tokens")), b(dir.str("b/train.tokens"));
  CHECK(b.info().end_of_document == 0);
  CHECK(b.info().vocab_size == 500);
  CHECK_NOTHROW(b.require_tokenizer(model.digest(), "tokenizer.json"));
  REQUIRE(a.documents() == b.documents());
  for (std::int64_t d = 0; d < a.documents(); ++d) {
    std::vector<std::int32_t> shifted = a.document(d);
    for (auto& t : shifted) t += t < 256;
    if (is_special(dir, "a", d)) shifted = {'a' + 1, 0, 'b' + 1};
    CHECK(b.document(d) == shifted);
  }
}

TEST_CASE("prepare-text --tokenizer refuses what it cannot reproduce (exit 2)", "[process][text]") {
  TempDir dir;
  const std::string corpus = make_corpus(dir);
  write_text(dir.path() / "wordpiece.json", R"({"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": {"type": "ByteLevel"}})");
  ProcessResult r = run_command(prepare_exe() + corpus + " --out " + dir.str("out") + " --tokenizer " +
                                    dir.str("wordpiece.json"),
                                dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("wordpiece.json: model.type is \"WordPiece\""));
  CHECK_FALSE(fs::exists(dir.path() / "out"));
  r = run_command(prepare_exe() + corpus + " --out " + dir.str("out") + " --tokenizer " +
                      dir.str("wordpiece.json") + " --vocab-size 300",
                  dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--vocab-size and --tokenizer exclude each other"));
}
