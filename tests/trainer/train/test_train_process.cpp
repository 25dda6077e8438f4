// Process-level tests of codistill-train: real processes, real files, exit codes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "support/process.hpp"

using codistill::test::read_events;
using codistill::test::read_text;
using codistill::test::run_command;
using codistill::test::TempDir;
using codistill::test::train_exe;
using codistill::test::write_text;
namespace fs = std::filesystem;

namespace {

// A small, quick synthetic problem: 10 Gaussian classes in 64 dimensions.
const char* kSyntheticConfig = R"(run:
  seed: 3
  threads: 2
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 1024
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [64, 64]
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 300
  eval_every: 100
  log_every: 25
)";

std::string train_cmd(const TempDir& dir, const std::string& config, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str(config) + " --run-dir " + dir.str("run") + " " + extra;
}

}  // namespace

TEST_CASE("codistill-train learns a synthetic task: loss falls, accuracy far above chance", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kSyntheticConfig);
  auto r = run_command(train_cmd(dir, "c.yaml"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);

  fs::path worker = dir.path() / "run" / "worker-000";
  REQUIRE(fs::exists(dir.path() / "run" / "config.yaml"));
  REQUIRE(fs::exists(worker / "train.log"));
  auto train = read_events(worker / "metrics.jsonl", "train");
  REQUIRE(train.size() == 12);
  for (const auto& e : train) {
    CHECK(e.contains("time"));
    CHECK(e.at("teachers") == 0);
    CHECK(e.at("staleness").is_null());
    CHECK(e.at("examples_per_s").get<double>() > 0);
  }
  double first = train.front().at("loss"), last = train.back().at("loss");
  CHECK(last < 0.6 * first);

  auto evals = read_events(worker / "metrics.jsonl", "eval");
  REQUIRE(evals.size() == 3);  // steps 100, 200 and the final one
  CHECK(evals.back().at("step") == 300);
  CHECK(evals.back().at("split") == "test");
  CHECK(evals.back().at("churn").is_object());

  auto done = read_events(worker / "metrics.jsonl", "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("accuracy").get<double>() > 0.5);  // chance is 0.1
  CHECK(done[0].at("step") == 300);
  CHECK(r.out.find("summary: steps 300") != std::string::npos);
}

TEST_CASE("codistill-train with micro-batches and an sgdr schedule trains as with whole batches", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kSyntheticConfig);
  const std::string common =
      " --set train.steps=40 --set train.log_every=1 --set optimizer.schedule.kind=sgdr"
      " --set optimizer.schedule.restart_steps=10 --set optimizer.schedule.restart_mult=2";
  auto whole = run_command(train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str("whole") + common, dir);
  INFO(whole.out << whole.err);
  REQUIRE(whole.exit_code == 0);
  auto parts = run_command(train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str("parts") + common +
                               " --set train.micro_batches=4",
                           dir);
  INFO(parts.out << parts.err);
  REQUIRE(parts.exit_code == 0);
  CHECK(parts.out.find("gradients summed over 4 micro-batches of 16") != std::string::npos);
  CHECK(read_text(dir.path() / "parts" / "config.yaml").find("  micro_batches: 4\n") != std::string::npos);

  auto a = read_events(dir.path() / "whole" / "worker-000" / "metrics.jsonl", "train");
  auto b = read_events(dir.path() / "parts" / "worker-000" / "metrics.jsonl", "train");
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("step " << a[i].at("step"));
    CHECK(b[i].at("lr") == a[i].at("lr"));  // the schedule does not depend on the split
    // Float rounding of the split sums only (tests/codistill/train/test_step.cpp); 40
    // steps of momentum SGD do not amplify it past this.
    CHECK(b[i].at("loss").get<double>() == Approx(a[i].at("loss").get<double>()).epsilon(1e-4));
  }
  // The line of step s reports the rate step s used, learning_rate(s - 1): sgdr restarts
  // at 0.05 on steps 11 and 31 (periods of 10 and 20 steps) and is halfway down on step 6.
  CHECK(a[10].at("lr").get<double>() == Approx(0.05));
  CHECK(a[30].at("lr").get<double>() == Approx(0.05));
  CHECK(a[5].at("lr").get<double>() == Approx(0.025));
  CHECK(a[9].at("lr").get<double>() < 0.01);
  CHECK(b.back().at("loss").get<double>() < 0.9 * b.front().at("loss").get<double>());  // it learns
}

TEST_CASE("codistill-train never overwrites an existing run", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kSyntheticConfig);
  REQUIRE(run_command(train_cmd(dir, "c.yaml", "--set train.steps=20"), dir).exit_code == 0);
  fs::path metrics = dir.path() / "run" / "worker-000" / "metrics.jsonl";
  std::string before = read_text(metrics);

  // no-resume refuses the worker folder as it is.
  auto refused = run_command(train_cmd(dir, "c.yaml", "--set train.steps=20 --no-resume"), dir);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("never overwrites") != std::string::npos);
  CHECK(read_text(metrics) == before);

  // The default finds the run finished: it says so and changes nothing.
  auto again = run_command(train_cmd(dir, "c.yaml", "--set train.steps=20"), dir);
  CHECK(again.exit_code == 0);
  CHECK(again.out.find("has finished") != std::string::npos);
  CHECK(read_text(metrics) == before);

  // data.prefetch never changes a run: a directory whose config.yaml has another setting (as
  // builds before `auto` wrote `prefetch: true`) holds the same run.
  const fs::path recorded = dir.path() / "run" / "config.yaml";
  std::string text = read_text(recorded);
  const auto at = text.find("prefetch: ");
  REQUIRE(at != std::string::npos);
  text.replace(at, text.find('\n', at) - at, "prefetch: true");
  write_text(recorded, text);
  auto old_build = run_command(train_cmd(dir, "c.yaml", "--set train.steps=20 --set data.prefetch=false"), dir);
  CHECK(old_build.exit_code == 0);
  CHECK(old_build.out.find("has finished") != std::string::npos);

  // A different config in the same run directory is refused as another run; another worker
  // count is not another run (the cohort is elastic: tests/trainer/teachers/test_elastic_process.cpp).
  auto other = run_command(train_cmd(dir, "c.yaml", "--worker 1 --workers 2 --set train.steps=20 --set optimizer.lr=0.5"),
                           dir);
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("different run") != std::string::npos);
}

TEST_CASE("codistill-train: configuration errors exit 2 naming the key and line", "[process]") {
  TempDir dir;
  SECTION("unknown key") {
    write_text(dir.path() / "bad.yaml", "optimizer:\n  kind: sgd\n  lr: 0.1\n  momentun: 0.9\n");
    auto r = run_command(train_cmd(dir, "bad.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("optimizer.momentun") != std::string::npos);
    CHECK(r.err.find(":4") != std::string::npos);
  }
  SECTION("wrong type") {
    write_text(dir.path() / "bad.yaml", "train:\n  steps: lots\n");
    auto r = run_command(train_cmd(dir, "bad.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("train.steps") != std::string::npos);
    CHECK(r.err.find(":2") != std::string::npos);
  }
  SECTION("out of range") {
    write_text(dir.path() / "bad.yaml", "data:\n  kind: synthetic\n  batch_size: 0\n");
    auto r = run_command(train_cmd(dir, "bad.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("data.batch_size") != std::string::npos);
    CHECK(r.err.find(":3") != std::string::npos);
  }
  SECTION("micro-batches that do not divide the batch") {
    write_text(dir.path() / "bad.yaml", "data:\n  kind: synthetic\n  batch_size: 64\ntrain:\n  micro_batches: 3\n");
    auto r = run_command(train_cmd(dir, "bad.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("train.micro_batches") != std::string::npos);
    CHECK(r.err.find(":5") != std::string::npos);
    CHECK(r.err.find("divisor of data.batch_size = 64") != std::string::npos);
  }
  SECTION("unknown model kind lists the valid ones") {
    write_text(dir.path() / "bad.yaml", "model:\n  kind: transformer\n");
    auto r = run_command(train_cmd(dir, "bad.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("model.kind") != std::string::npos);
    CHECK(r.err.find("mlp") != std::string::npos);
    CHECK(r.err.find("cnn") != std::string::npos);
  }
  SECTION("bad --set override") {
    write_text(dir.path() / "ok.yaml", kSyntheticConfig);
    auto r = run_command(train_cmd(dir, "ok.yaml", "--set optimizer.lrr=0.1"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("optimizer.lrr") != std::string::npos);
  }
  SECTION("usage error") {
    auto r = run_command(train_exe() + " --no-such-flag", dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("usage:") != std::string::npos);
  }
  SECTION("missing config file") {
    auto r = run_command(train_cmd(dir, "absent.yaml"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("absent.yaml") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000" / "metrics.jsonl"));
}

TEST_CASE("codistill-train: runtime failures exit 1 with a clear message", "[process]") {
  TempDir dir;
  SECTION("missing data files") {
    write_text(dir.path() / "c.yaml", std::string("data:\n  kind: idx\n  path: ") + dir.str("nodata") + "\n");
    auto r = run_command(train_cmd(dir, "c.yaml"), dir);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("nodata") != std::string::npos);
  }
  SECTION("a diverging run stops at the step where the loss became non-finite") {
    write_text(dir.path() / "c.yaml", kSyntheticConfig);
    auto r = run_command(train_cmd(dir, "c.yaml", "--set optimizer.lr=1e30 --set optimizer.momentum=0"), dir);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("non-finite loss") != std::string::npos);
    CHECK(r.err.find("at step ") != std::string::npos);
  }
  SECTION("a model too big for memory names the layer and the bytes, not just bad_alloc") {
    write_text(dir.path() / "c.yaml", kSyntheticConfig);
    auto r = run_command(train_cmd(dir, "c.yaml", "--set model.hidden=[4000000000000]"), dir);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("out of memory: cannot allocate") != std::string::npos);
    CHECK(r.err.find("layer 'fc1'") != std::string::npos);
    CHECK(r.err.find("TiB") != std::string::npos);
    CHECK(r.err.find("std::bad_alloc") == std::string::npos);
  }
}
