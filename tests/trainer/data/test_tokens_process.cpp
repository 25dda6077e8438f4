// data.kind tokens through codistill-train: an order-2 Markov chain written by NumPy as llm.c
// shards and as headerless nanoGPT .bin files trains to the very same losses; disjoint
// workers take every other file; a token outside the vocabulary stops the run at start,
// naming file and offset.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/process.hpp"
#include "support/test_util.hpp"

using namespace codistill::test;
namespace fs = std::filesystem;

namespace {

// A run of configs/text_gpt.yaml made small: 20 steps, one evaluation at the end.
ProcessResult train_tokens(const TempDir& dir, const std::string& name, const std::string& sets) {
  return run_command(train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) +
                         "/configs/text_gpt.yaml --run-dir " + dir.str(name) +
                         " --set data.kind=tokens --set data.train='train_*.bin' --set data.valid='valid_*.bin'"
                         " --set model.vocab_size=32 --set data.context=32 --set model.seq_len=32"
                         " --set model.d_model=32 --set model.blocks=1 --set data.batch_size=8"
                         " --set train.steps=20 --set train.eval_every=20 --set train.log_every=5"
                         " --set checkpoint.every=0 --set data.test_limit=50 --set run.threads=1 " + sets,
                     dir);
}

bool write_chain(const TempDir& dir) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    skip("no NumPy for /usr/bin/python3 (scripts/setup.sh installs it)");
    return false;
  }
  const auto w = run_command("/usr/bin/python3 " + std::string(CODISTILL_SOURCE_DIR) +
                                 "/tests/trainer/data/write_markov_tokens.py " + dir.str("chain") + " 32 5 40000 4000",
                             dir);
  INFO(w.out << w.err);
  REQUIRE(w.exit_code == 0);
  return true;
}

}  // namespace

TEST_CASE("llm.c shards and headerless uint16 files of one stream train to identical losses", "[process][tokens]") {
  TempDir dir;
  if (!write_chain(dir)) return;
  const auto a = train_tokens(dir, "llmc", "--set data.path=" + dir.str("chain/llmc"));
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  const auto b = train_tokens(dir, "raw", "--set data.path=" + dir.str("chain/raw") + " --set data.token_dtype=uint16");
  INFO(b.out << b.err);
  REQUIRE(b.exit_code == 0);
  CHECK((a.out + a.err).find("2 of 2 shards, 40000 tokens") != std::string::npos);
  const auto ta = read_events(dir.path() / "llmc/worker-000/metrics.jsonl", "train");
  const auto tb = read_events(dir.path() / "raw/worker-000/metrics.jsonl", "train");
  REQUIRE(ta.size() == 4);
  REQUIRE(tb.size() == ta.size());
  for (std::size_t i = 0; i < ta.size(); ++i) CHECK(ta[i].at("loss") == tb[i].at("loss"));
  const auto ea = read_events(dir.path() / "llmc/worker-000/metrics.jsonl", "eval");
  const auto eb = read_events(dir.path() / "raw/worker-000/metrics.jsonl", "eval");
  REQUIRE(ea.size() == 1);
  REQUIRE(eb.size() == 1);
  CHECK(ea[0].at("loss") == eb[0].at("loss"));
  CHECK(ea[0].at("loss").get<double>() < 3.6);  // below log(32) = 3.47 + a margin: it ran on the data
  const auto first = read_events(dir.path() / "llmc/worker-000/metrics.jsonl", "data");
  REQUIRE(first.size() == 1);
  CHECK(first[0].at("kind") == "tokens");
  CHECK(first[0].at("train_tokens") == 40000);
}

TEST_CASE("token shards: disjoint workers take every other file, bad shards stop the run", "[process][tokens]") {
  TempDir dir;
  if (!write_chain(dir)) return;
  const std::string llmc = "--set data.path=" + dir.str("chain/llmc");
  const auto w1 = train_tokens(dir, "w1", llmc + " --set run.workers=2 --set run.worker=1 --set train.steps=5");
  INFO(w1.out << w1.err);
  REQUIRE(w1.exit_code == 0);
  CHECK((w1.out + w1.err).find("1 of 2 shards, 20000 tokens (disjoint mode)") != std::string::npos);
  const auto three = train_tokens(dir, "w3", llmc + " --set run.workers=3 --set train.steps=5");
  CHECK(three.exit_code != 0);
  CHECK(three.err.find("data.train: 2 shard files, too few for 3 workers") != std::string::npos);

  const auto small = train_tokens(dir, "v16", llmc + " --set model.vocab_size=16");
  CHECK(small.exit_code != 0);
  CHECK(small.err.find("is outside the vocabulary of 16 (model.vocab_size)") != std::string::npos);
  CHECK(small.err.find("token ") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "v16" / "worker-000" / "metrics.jsonl"));
  const auto none = train_tokens(dir, "none", llmc + " --set data.train='nothing_*.bin'");
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("data.train") != std::string::npos);
  CHECK(none.err.find("matches no file") != std::string::npos);
  const auto raw = train_tokens(dir, "raw", "--set data.path=" + dir.str("chain/raw"));
  CHECK(raw.exit_code != 0);
  CHECK(raw.err.find("no llm.c header") != std::string::npos);
  const auto novocab = train_tokens(dir, "novocab", llmc + " --set model.vocab_size=0");
  CHECK(novocab.exit_code == 2);
  CHECK(novocab.err.find("data.kind tokens needs model.vocab_size") != std::string::npos);
}
