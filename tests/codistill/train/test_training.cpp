// The training engine in-process: determinism and evaluation.
#include <catch2/catch.hpp>

#include <cstring>

#include "codistill/config/config_loader.hpp"
#include "codistill/train/training.hpp"
#include "support/process.hpp"
#include "support/small_run.hpp"

using namespace codistill;

namespace {

Config small_config(const std::string& run_dir, const std::string& model_kind) {
  test::SmallRun s;
  s.model = model_kind;
  s.dropout = 0.1;  // dropout masks must be reproducible too
  return test::small_run_config(run_dir, s);
}

std::vector<std::vector<float>> train_and_copy_params(const Config& c) {
  TrainOptions opts;
  opts.console = false;
  Trainer t(c, opts);
  t.run();
  std::vector<std::vector<float>> out;
  for (auto& p : t.model().params())
    out.emplace_back(p.value->data<float>(), p.value->data<float>() + p.value->numel());
  return out;
}

}  // namespace

TEST_CASE("same config and thread count give bit-identical parameters", "[train]") {
  for (std::string kind : {"mlp", "cnn", "resnet"}) {
    DYNAMIC_SECTION(kind) {
      test::TempDir dir;
      auto a = train_and_copy_params(small_config(dir.str("a"), kind));
      auto b = train_and_copy_params(small_config(dir.str("b"), kind));
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        REQUIRE(a[i].size() == b[i].size());
        CHECK(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) == 0);
      }
      // A different seed gives different parameters, so the comparison above can fail.
      Config other = small_config(dir.str("c"), kind);
      other.run.seed = 12;
      auto c = train_and_copy_params(other);
      CHECK(std::memcmp(a[0].data(), c[0].data(), a[0].size() * sizeof(float)) != 0);
    }
  }
}

TEST_CASE("the config file written to the run directory reads back as the run's config", "[train]") {
  test::TempDir dir;
  Config c = small_config(dir.str("run"), "mlp");
  c.train.steps = 2;
  TrainOptions opts;
  opts.console = false;
  Trainer(c, opts).run();
  Config back = load_config(dir.str("run/config.yaml"));
  CHECK(config_differences(back, c).empty());
}

// A write that failed part-way in a folder that had gone unwritable could not remove its
// temp file; the running worker removes its own leftovers after its next publish (the
// start-up cleanup only covers dead writers). Both writer modes.
TEST_CASE("a worker removes its own leftover temp file after its next checkpoint", "[train][checkpoint]") {
  for (bool async : {true, false}) {
    INFO("checkpoint.async " << async);
    test::TempDir dir;
    Config c = small_config(dir.str("run"), "mlp");
    c.checkpoint.every = 20;
    c.checkpoint.async = async;
    TrainOptions opts;
    opts.console = false;
    Trainer t(c, opts);
    const std::string leftover =
        dir.str("run/worker-000/.ckpt-000000010.h5.tmp." + std::to_string(static_cast<long>(::getpid())));
    test::write_text(leftover, "half written");
    t.run();
    CHECK_FALSE(std::filesystem::exists(leftover));
  }
}
