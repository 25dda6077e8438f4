// Training options in the whole engine: data.prefetch changes nothing in the result,
// data.augment does; model.init_from starts a run from another run's weights and nothing
// else of it, refuses another model or a missing path (ConfigError: exit 2), and yields to
// the run's own checkpoints on resume.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/train/training.hpp"
#include "codistill/persist/worker_state.hpp"
#include "support/process.hpp"
#include "support/small_run.hpp"

using namespace codistill;
namespace fs = std::filesystem;

namespace {

Config small_config(const std::string& run_dir) {
  test::SmallRun s;
  s.model = "cnn";
  s.seed = 21;
  s.train_examples = 512;
  s.test_examples = 128;
  s.hidden = 16;
  s.dropout = 0.1;
  s.steps = 40;  // 2.5 epochs: epoch boundaries inside the run
  Config c = test::small_run_config(run_dir, s);
  c.train.log_every = 50;  // the default
  c.checkpoint.every = 20;
  return c;
}

std::vector<float> model_params(Model& m) {
  std::vector<float> out;
  for (auto& p : m.params())
    out.insert(out.end(), p.value->data<float>(), p.value->data<float>() + p.value->numel());
  return out;
}

std::vector<float> trained_params(const Config& c) {
  TrainOptions opts;
  opts.console = false;
  Trainer t(c, opts);
  t.run();
  return model_params(t.model());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("prefetch on and off train bit-identically, with augmentation and micro-batches", "[train][prefetch]") {
  test::TempDir dir;
  Config c = small_config("");
  c.data.augment.crop_padding = 2;
  c.data.augment.flip = true;
  c.train.micro_batches = 2;
  c.run.dir = dir.str("on");
  c.data.prefetch = "true";
  const auto on = trained_params(c);
  c.run.dir = dir.str("off");
  c.data.prefetch = "false";
  const auto off = trained_params(c);
  CHECK(same_bits(on, off));
  // The checkpoints, sampler position included, are the same too.
  const auto a = checkpoint::read(checkpoint::RunStore(dir.str("on")).checkpoint_path(0, 20));
  const auto b = checkpoint::read(checkpoint::RunStore(dir.str("off")).checkpoint_path(0, 20));
  CHECK(a.meta.content_digest == b.meta.content_digest);
  // Augmentation itself changes the run (so the comparison above can fail).
  c.run.dir = dir.str("plain");
  c.data.augment = {};
  CHECK(!same_bits(trained_params(c), off));
}

TEST_CASE("model.init_from starts from a checkpoint's parameters, with a fresh optimizer and step", "[train][init]") {
  test::TempDir dir;
  Config src = small_config(dir.str("source"));
  trained_params(src);
  const checkpoint::RunStore source(dir.str("source"));
  const std::string ckpt = source.checkpoint_path(0, 40);
  const auto data = checkpoint::read(ckpt);
  Model reference = model_from_checkpoint(data);

  Config c = small_config("");
  c.optimizer.lr = 0.01;  // fine-tuning with other training settings is the point
  c.run.seed = 3;
  // Section names must not depend on the temporary directory: Catch re-enters the test
  // case once per section and tells sections apart by name.
  const std::pair<const char*, std::string> specs[] = {
      {"a checkpoint file", ckpt},
      {"a run directory", dir.str("source")},
      {"a worker folder", dir.str("source/worker-000")}};
  for (const auto& [what, spec] : specs) {
    DYNAMIC_SECTION("from " << what) {
      c.run.dir = dir.str("tuned");
      c.model.init_from = spec;
      c.train.steps = 5;
      TrainOptions opts;
      opts.console = false;
      Trainer t(c, opts);
      CHECK(same_bits(model_params(t.model()), model_params(reference)));
      // The step-0 evaluation is the source's.
      const data::Splits splits = data::load_dataset(c.data);
      const EvalResult mine = evaluate(t.model(), splits.test, 64);
      const EvalResult theirs = evaluate(reference, splits.test, 64);
      CHECK(mine.loss == theirs.loss);
      CHECK(mine.accuracy == theirs.accuracy);
      t.run();
      // Step, optimizer and sampler started at 0: after 5 steps they say 5.
      const auto tuned = checkpoint::read(checkpoint::RunStore(dir.str("tuned")).checkpoint_path(0, 5));
      CHECK(tuned.meta.step == 5);
      CHECK(tuned.find(checkpoint::Section::state, "optimizer/step")->values<std::int64_t>()[0] == 5);
      CHECK(tuned.find(checkpoint::Section::state, "sampler/position")->values<std::int64_t>()[1] == 5 * 32);
      CHECK(test::read_text(dir.path() / "tuned" / "worker-000" / "train.log").find("model initialized from") !=
            std::string::npos);
    }
  }
}

TEST_CASE("model.init_from refuses another model, a missing path and a folder without checkpoints", "[train][init]") {
  test::TempDir dir;
  Config src = small_config(dir.str("source"));
  src.train.steps = 20;
  trained_params(src);
  TrainOptions opts;
  opts.console = false;

  Config c = small_config(dir.str("tuned"));
  c.model.hidden = {24};
  c.model.init_from = dir.str("source");
  try {
    Trainer t(c, opts);
    FAIL("another model was accepted");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.key_path() == "model.init_from");
    CHECK(what.find("model.hidden [16] vs [24]") != std::string::npos);
    CHECK(what.find("fc1/weight") != std::string::npos);
  }
  c.model.hidden = {16};
  c.model.init_from = dir.str("nowhere");
  CHECK_THROWS_WITH(Trainer(c, opts), Catch::Contains("model.init_from") && Catch::Contains("nowhere': no such file or directory"));
  fs::create_directories(dir.path() / "empty" / "worker-000");
  c.model.init_from = dir.str("empty/worker-000");
  CHECK_THROWS_WITH(Trainer(c, opts), Catch::Contains("holds no checkpoint"));
  c.model.init_from = dir.str("source");
  c.run.worker = 1;
  c.run.workers = 2;
  CHECK_THROWS_WITH(Trainer(c, opts), Catch::Contains("no folder of this worker (worker-001; it has worker-000)"));
  // Refused before anything was written.
  CHECK(!fs::exists(dir.path() / "tuned"));
}

TEST_CASE("a resumed run ignores model.init_from: its own checkpoint wins", "[train][init]") {
  test::TempDir dir;
  Config src = small_config(dir.str("source"));
  src.train.steps = 20;
  trained_params(src);
  Config c = small_config(dir.str("tuned"));
  c.model.init_from = dir.str("source");
  c.train.steps = 20;
  c.checkpoint.every = 10;
  const auto whole = trained_params(c);
  // Back to step 10, as if killed there; the source is gone: it is not read again.
  const checkpoint::RunStore tuned(dir.str("tuned"));
  fs::remove(tuned.checkpoint_path(0, 20));
  fs::remove_all(dir.path() / "source");
  CHECK(same_bits(trained_params(c), whole));
  const std::string log = test::read_text(dir.path() / "tuned" / "worker-000" / "train.log");
  CHECK(log.find("model.init_from (" + dir.str("source") + ") ignored: resuming") != std::string::npos);
}
