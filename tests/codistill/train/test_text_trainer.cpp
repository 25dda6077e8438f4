// Language-model training (data.kind text) at the level of the Trainer and its checks:
// the model and config against the data (errors naming the keys), a whole run through the
// Trainer (eval events per token, the unigram baseline event, a bit-exact resume), the
// teachers' fit, and codistill-inspect's refusal of text checkpoints. The model is the
// bigram stand-in of text_fixture.hpp, but for train.recompute (a gpt's blocks).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/teachers/teachers.hpp"
#include "codistill/data/feed/text_source.hpp"
#include "codistill/train/modality.hpp"
#include "codistill/train/training.hpp"
#include "codistill/persist/worker_state.hpp"
#include "codistill/inspect/inspect.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "text_fixture.hpp"

using namespace codistill;
using namespace codistill::test_text;

TEST_CASE("text data against the model and the config: clear errors naming the keys", "[train][text][config]") {
  Folder f;
  DataConfig dc;
  dc.kind = "text";
  dc.path = f.path;
  const TextData td = load_text_data(dc);
  CHECK(td.vocab == kVocab);
  ModelConfig mc;
  mc.vocab_size = 300;
  CHECK_THROWS_WITH(check_text_model(mc, kVocab, 16, "model"),
                    Catch::Matchers::Contains("model.vocab_size") && Catch::Matchers::Contains("257"));
  mc.vocab_size = kVocab;
  mc.kind = "gpt";
  mc.seq_len = 8;
  CHECK_THROWS_WITH(check_text_model(mc, kVocab, 16, "model"),
                    Catch::Matchers::Contains("data.context") && Catch::Matchers::Contains("model.seq_len is 8"));
  mc.seq_len = 16;
  CHECK_NOTHROW(check_text_model(mc, kVocab, 16, "model"));
  dc.path = f.dir.str("nothing-here");
  CHECK_THROWS_AS(load_text_data(dc), ConfigError);

  CHECK_THROWS_WITH(parse_config("data: {kind: text, context: 64}\nmodel: {kind: gpt, seq_len: 32}\n"),
                    Catch::Matchers::Contains("data.context"));
  CHECK_THROWS_WITH(parse_config("data: {kind: text, augment: {flip: true}}\n"),
                    Catch::Matchers::Contains("data.augment"));
  CHECK_NOTHROW(parse_config("data: {kind: text, context: 32, path: x}\nmodel: {kind: gpt, seq_len: 32, vocab_size: 8192}\n"));
}

TEST_CASE("a text run through the Trainer: per-token eval events, a bit-exact resume", "[train][text][trainer]") {
  Folder f;
  codistill::test::TempDir dir;
  Config c;
  c.run.dir = dir.str("run");
  c.run.seed = 3;
  c.run.threads = 1;
  c.data.kind = "text";
  c.data.path = f.path;
  c.data.context = 16;
  c.data.batch_size = 8;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 0.01;
  c.train.steps = 6;
  c.train.eval_every = 3;
  c.train.log_every = 3;
  c.train.micro_batches = 2;
  c.train.eval_batch_size = 64;  // 4 windows of 16 per evaluation batch
  c.checkpoint.every = 3;
  TrainOptions o;
  o.console = false;
  o.model_factory = [](const ModelConfig& mc, Rng& rng) {
    // The data decides the model's input and output: [T] token ids, the vocabulary.
    CHECK(mc.input_shape == std::vector<std::int64_t>{16});
    CHECK(mc.classes == kVocab);
    CHECK(mc.vocab_size == kVocab);  // 0 in the config: taken from the token file
    return bigram(rng);
  };
  const std::string last = c.run.dir + "/worker-000/ckpt-000000006.h5";
  {
    Trainer t(c, o);
    t.run();
  }
  const std::string digest = checkpoint::read(last).meta.content_digest;
  // As if the run had stopped after step 3: resuming from that checkpoint ends the same.
  std::filesystem::remove(last);
  {
    Trainer t(c, o);
    t.run();
  }
  CHECK(checkpoint::read(last).meta.content_digest == digest);

  std::ifstream in(c.run.dir + "/worker-000/metrics.jsonl");
  std::map<std::string, int> seen;
  std::vector<std::int64_t> data_steps;
  const text::TokenFile valid(f.path + "/valid.tokens");
  const std::int64_t windows_held_out = text::EvalWindows(valid, 16).count();
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    const std::string event = e["event"];
    ++seen[event];
    if (event == "data") {
      data_steps.push_back(e["step"].get<std::int64_t>());
      CHECK(e["kind"] == "text");
      CHECK(e["vocab_size"] == kVocab);
      CHECK(e["unigram_ce"].get<double>() > 0);
      CHECK(e["unigram_ce"].get<double>() < std::log(static_cast<double>(kVocab)));
    }
    if (event == "eval") {
      CHECK(e["perplexity"].get<double>() == Approx(std::exp(e["loss"].get<double>())));
      CHECK(e["tokens"] == windows_held_out * 16);
    }
    if (event == "done") CHECK(e["perplexity"].get<double>() == Approx(std::exp(e["loss"].get<double>())));
  }
  CHECK(seen["data"] == 2);  // the first event of each start
  CHECK(data_steps == std::vector<std::int64_t>{0, 3});  // the second start resumed at step 3
  CHECK(seen["eval"] >= 3);
  CHECK(seen["done"] == 2);
}

// train.recompute is a property of the student's module tree that the set-up turns on: a gpt
// with dropout, in micro-batches, with AdamW, ends with the same bits (parameters, optimizer
// state, dropout streams: the checkpoint's content digest) with and without it.
TEST_CASE("a text gpt run recomputing its blocks ends with the checkpoint of one that does not", "[train][text][recompute]") {
  Folder f;
  codistill::test::TempDir dir;
  Config c;
  c.run.seed = 5;
  c.run.threads = 1;
  c.data.kind = "text";
  c.data.path = f.path;
  c.data.context = 16;
  c.data.batch_size = 4;
  c.model.kind = "gpt";
  c.model.blocks = 2;
  c.model.d_model = 16;
  c.model.heads = 2;
  c.model.seq_len = 16;
  c.model.mlp_ratio = 2;
  c.model.dropout = 0.1;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 0.01;
  c.train.steps = 4;
  c.train.eval_every = 2;
  c.train.log_every = 2;
  c.train.micro_batches = 2;
  c.train.eval_batch_size = 32;
  c.checkpoint.every = 4;
  TrainOptions o;
  o.console = false;
  std::string digest[2];
  for (int i = 0; i < 2; ++i) {
    c.train.recompute = i == 0 ? "none" : "blocks";
    c.run.dir = dir.str("run_" + c.train.recompute);
    Trainer t(c, o);
    t.run();
    digest[i] = checkpoint::read(c.run.dir + "/worker-000/ckpt-000000004.h5").meta.content_digest;
  }
  CHECK(digest[0] == digest[1]);
}

// Distillation on text: a teacher rebuilt from a text checkpoint reads the student's int32
// batch, joins the loss of every token, and churn is measured per held-out token.
TEST_CASE("a text run distills from a fixed text teacher", "[train][text][teachers]") {
  Folder f;
  codistill::test::TempDir dir;
  Config c;
  c.run.seed = 3;
  c.run.threads = 1;
  c.data.kind = "text";
  c.data.path = f.path;
  c.data.context = 16;
  c.data.batch_size = 8;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 0.01;
  c.train.steps = 4;
  c.train.eval_every = 0;
  c.train.log_every = 2;
  c.checkpoint.every = 0;
  TrainOptions o;
  o.console = false;
  o.model_factory = [](const ModelConfig&, Rng& rng) { return bigram(rng); };
  c.run.dir = dir.str("teacher");
  {
    Trainer t(c, o);
    t.run();
  }
  Config student = c;
  student.run.dir = dir.str("student");
  student.run.seed = 4;
  student.codistill.fixed_teachers = {c.run.dir + "/worker-000"};
  student.codistill.weight = 0.5;
  {
    Trainer t(student, o);
    t.run();
  }
  std::ifstream in(student.run.dir + "/worker-000/metrics.jsonl");
  int trains = 0, evals = 0;
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e["event"] == "train") {
      ++trains;
      CHECK(e["teachers"] == 1);
      CHECK(e["distill"].get<double>() > 0);
      CHECK(e["tokens_per_s"].get<double>() > 0);
    }
    if (e["event"] == "eval") {
      ++evals;
      const double churn = e["churn"]["fixed-0"].get<double>();
      CHECK((churn > 0 && churn <= 1));  // two differently seeded bigram tables disagree somewhere
    }
  }
  CHECK(trains == 2);
  CHECK(evals == 1);
}

TEST_CASE("a language-model teacher must take the student's windows and vocabulary", "[train][text][teachers]") {
  auto lm = [](std::int64_t context, std::int64_t vocab, std::int64_t seq_len) {
    ModelConfig mc;
    mc.input_shape = {context};
    mc.classes = vocab;
    mc.vocab_size = vocab;
    mc.seq_len = seq_len;
    return mc;
  };
  const ModelConfig student = lm(32, kVocab, 0);
  CHECK_NOTHROW(check_teacher_fits(model_yaml(lm(32, kVocab, 0)), student, "peer 1"));
  CHECK_THROWS_WITH(check_teacher_fits(model_yaml(lm(16, kVocab, 0)), student, "peer 1"),
                    Catch::Matchers::Contains("windows of 16 tokens") && Catch::Matchers::Contains("data.context = 32"));
  CHECK_THROWS_WITH(check_teacher_fits(model_yaml(lm(32, 300, 0)), student, "peer 1"),
                    Catch::Matchers::Contains("vocabulary of 300"));
}

TEST_CASE("codistill-inspect eval refuses a text checkpoint, saying where its numbers are", "[train][text][inspect]") {
  Folder f;
  codistill::test::TempDir dir;
  Model m = bigram(1);
  OptimizerConfig oc;
  auto opt = make_optimizer(oc, m);
  Config c;
  c.data.kind = "text";
  c.data.path = f.path;
  const text::TokenFile train(f.path + "/train.tokens");
  TextBatchSource source(train, {});
  WorkerState w;
  w.model = &m;
  w.optimizer = opt.get();
  w.source = &source;
  w.model_yaml = "kind: test-bigram\n";
  w.config_yaml = to_yaml(c);
  const std::string path = dir.str("ckpt-000000000.h5");
  checkpoint::write(path, make_state_view(w).view);
  CHECK_THROWS_WITH(inspect::eval({path}), Catch::Matchers::Contains("data.kind text") &&
                                               Catch::Matchers::Contains("metrics.jsonl"));
}
