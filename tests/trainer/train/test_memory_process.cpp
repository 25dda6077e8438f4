// Process-level tests of the memory plan (codistill/train/memory_plan.hpp): a run prints
// its plan and sends it, then the measured peak, to metrics.jsonl; a run over
// train.memory_limit stops before anything is written, exit 2, with the plan and what to
// change.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/process.hpp"

using namespace codistill::test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(run:
  seed: 3
  threads: 2
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 2048
  synthetic_test: 256
  synthetic_shape: [1, 16, 16]
model:
  kind: mlp
  hidden: [128]
optimizer:
  kind: adamw
  lr: 0.001
train:
  steps: 20
  eval_every: 0
  log_every: 10
checkpoint:
  every: 10
)";

std::string cmd(const TempDir& dir, const std::string& run, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

}  // namespace

TEST_CASE("memory plan: printed at start, and the measured peak at the end, in metrics.jsonl", "[process][memory]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const auto run = run_command(cmd(dir, "run"), dir);
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  CHECK((run.out + run.err).find("memory plan:") != std::string::npos);
  const auto events = read_events(dir.path() / "run" / "worker-000" / "metrics.jsonl", "memory");
  REQUIRE(events.size() == 2);
  const auto& plan = events[0];
  CHECK(plan.at("phase") == "plan");
  // AdamW: two slots like the parameters; the asynchronous checkpoint's second copy of all three.
  const std::int64_t params = plan.at("parameters");
  CHECK(params >= 4 * (256 * 128 + 128 + 128 * 10 + 10));
  CHECK(plan.at("optimizer") == 2 * params);
  CHECK(plan.at("checkpoint_staging") == 3 * params);
  CHECK(plan.at("activations").get<std::int64_t>() > 0);
  const auto& measured = events[1];
  CHECK(measured.at("phase") == "measured");
  CHECK(measured.at("planned_host_bytes") == plan.at("host_bytes"));
  const double ratio = measured.at("host_plan_ratio");
  CHECK(ratio > 0.5);  // loose: the accuracy itself is measured by bench/run_memory_plan.sh
  CHECK(ratio < 2.0);
}

TEST_CASE("memory plan: a run over train.memory_limit exits 2 before writing, with the plan and what to change",
          "[process][memory]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const auto small = run_command(cmd(dir, "small", "--set train.memory_limit=1MiB"), dir);
  INFO(small.out << small.err);
  CHECK(small.exit_code == 2);
  CHECK(small.err.find("train.memory_limit") != std::string::npos);
  CHECK(small.err.find("will not fit") != std::string::npos);
  CHECK(small.err.find("memory plan:") != std::string::npos);
  CHECK(small.err.find("data.batch_size (64)") != std::string::npos);
  CHECK(!fs::exists(dir.path() / "small" / "worker-000"));

  const auto bad = run_command(cmd(dir, "bad", "--set train.memory_limit=plenty"), dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("train.memory_limit") != std::string::npos);
}

TEST_CASE("train.recompute: blocks on a model without blocks exits 2 naming the key", "[process][memory]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const auto run = run_command(cmd(dir, "run", "--set train.recompute=blocks"), dir);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 2);
  CHECK(run.err.find("train.recompute") != std::string::npos);
  CHECK(run.err.find("model.kind mlp") != std::string::npos);
}
