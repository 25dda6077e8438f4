// codistill-prepare-text end to end on a small corpus folder (the project's own docs):
// the files it writes open, agree with each other and decode back to the documents; it
// refuses to overwrite a prepared folder without --force; usage errors exit 2.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "codistill/data/text/prepare.hpp"
#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/data/text/tokens/token_shard.hpp"
#include "support/process.hpp"

using namespace codistill::test;
using namespace codistill::data::text;
namespace fs = std::filesystem;

namespace {

std::string prepare_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-prepare-text"; }

// A corpus folder: the docs, and an empty file that must be skipped.
void make_corpus(const TempDir& dir) {
  fs::create_directories(dir.path() / "corpus" / "sub");
  int i = 0;
  for (const auto& e : fs::directory_iterator(std::string(CODISTILL_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md")
      fs::copy_file(e.path(), dir.path() / "corpus" / (i++ % 2 ? "sub" : "") / (e.path().stem().string() + ".txt"));
  write_text(dir.path() / "corpus" / "empty.txt", "");
  write_text(dir.path() / "corpus" / "ignored.md", "not a .txt file");
}

}  // namespace

TEST_CASE("prepare-text writes a tokenizer and two token files that decode to the corpus", "[process][text]") {
  TempDir dir;
  make_corpus(dir);
  const std::string cmd = prepare_exe() + " --corpus " + dir.str("corpus") + " --out " + dir.str("out") +
                          " --vocab-size 600 --heldout-fraction 0.3";
  ProcessResult r = run_command(cmd, dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("1 empty files skipped") && Catch::Contains("bytes/token"));

  const auto manifest = nlohmann::json::parse(read_text(dir.path() / "out" / kManifestFile));
  const Tokenizer tok = Tokenizer::load(dir.str("out/tokenizer.bpe"));
  CHECK(tok.vocab_size() == 600);
  for (const char* split : {"train", "valid"}) {
    INFO(split);
    const TokenFile f(dir.str("out/" + std::string(split) + ".tokens"));
    CHECK_NOTHROW(f.require_tokenizer(tok.digest(), "tokenizer.bpe"));
    const auto& names = manifest.at(std::string(split) + "_documents");
    REQUIRE(f.documents() == static_cast<std::int64_t>(names.size()));
    CHECK(f.documents() >= 1);
    CHECK(manifest.at(split).at("tokens") == f.tokens());
    for (std::int64_t d = 0; d < f.documents(); ++d)
      CHECK(tok.decode(f.document(d)) == read_text(dir.path() / "corpus" / names[d].get<std::string>()));
  }
  CHECK(manifest.at("documents") == manifest.at("train").at("documents").get<int>() +
                                        manifest.at("valid").at("documents").get<int>());

  // A second run refuses to replace the preparation; --force replaces it.
  const std::string before = read_text(dir.path() / "out" / "train.tokens");
  r = run_command(cmd, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("already holds a prepared corpus") && Catch::Contains("--force"));
  CHECK(read_text(dir.path() / "out" / "train.tokens") == before);
  r = run_command(cmd + " --force --json", dir);
  CHECK(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out).at("vocab_size") == 600);
  CHECK(read_text(dir.path() / "out" / "train.tokens") == before);  // deterministic
  int temp_files = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "out")) temp_files += e.path().filename().string()[0] == '.';
  CHECK(temp_files == 0);
}

TEST_CASE("prepare-text usage errors exit 2 with a message", "[process][text]") {
  TempDir dir;
  make_corpus(dir);
  const std::string base = prepare_exe() + " --out " + dir.str("out");
  ProcessResult r = run_command(base, dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("corpus"));
  r = run_command(base + " --corpus " + dir.str("nowhere"), dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("nowhere does not exist"));
  r = run_command(base + " --corpus " + dir.str("corpus") + " --vocab-size 100", dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--vocab-size must be at least 257"));
  r = run_command(base + " --corpus " + dir.str("corpus") + " --heldout-fraction 1", dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--heldout-fraction must be in [0, 1)"));
  r = run_command(base + " --corpus " + dir.str("corpus") + " --suffix .none", dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no files ending in '.none'"));
  r = run_command(base + " --corpus " + dir.str("corpus") + " --bogus", dir);
  CHECK(r.exit_code == 2);
  CHECK_FALSE(fs::exists(dir.path() / "out"));
  // An output path that cannot be created is a runtime failure (exit 1).
  write_text(dir.path() / "file", "x");
  r = run_command(prepare_exe() + " --corpus " + dir.str("corpus") + " --vocab-size 300 --out " + dir.str("file/out"), dir);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("error:"));
}

TEST_CASE("prepare-text --llmc writes llm.c shards of both splits that data.kind tokens trains on", "[process][text]") {
  TempDir dir;
  make_corpus(dir);
  ProcessResult r = run_command(prepare_exe() + " --corpus " + dir.str("corpus") + " --out " + dir.str("out") +
                                    " --vocab-size 400 --heldout-fraction 0.3 --llmc",
                                dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // Each shard is its split's documents, each led by the end-of-document token.
  for (const char* split : {"train", "valid"}) {
    const codistill::data::text::TokenFile f(dir.str("out/") + split + ".tokens");
    const codistill::data::text::TokenShard s(dir.str("out/") + split + ".bin", 0);
    REQUIRE(s.size() == f.tokens() + f.documents());
    std::vector<std::int32_t> got(static_cast<std::size_t>(s.size()));
    s.copy(0, s.size(), got.data());
    std::vector<std::int32_t> want;
    for (std::int64_t d = 0; d < f.documents(); ++d) {
      want.push_back(static_cast<std::int32_t>(f.info().end_of_document));
      for (std::int32_t t : f.document(d)) want.push_back(t);
    }
    CHECK(got == want);
  }
  const auto vocab = nlohmann::json::parse(read_text(dir.path() / "out" / "prepare.json"))["vocab_size"].get<int>();
  r = run_command(train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) + "/configs/text_gpt.yaml --run-dir " +
                      dir.str("run") + " --set data.kind=tokens --set data.path=" + dir.str("out") +
                      " --set data.train=train.bin --set data.valid=valid.bin --set model.vocab_size=" +
                      std::to_string(vocab) + " --set data.context=32 --set model.seq_len=32 --set model.blocks=1"
                      " --set train.steps=5 --set train.eval_every=5 --set checkpoint.every=0 --set data.test_limit=5"
                      " --set run.threads=1",
                  dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("(llm.c, 16-bit)") != std::string::npos);
}
