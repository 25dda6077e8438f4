// One process per worker, with real processes: a second trainer started as the same worker
// of the same run refuses at start (exit 2) naming the holder, while the first trains on
// alone; after the first exits the worker is free (its owner file gone).
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/process.hpp"

using namespace codistill::test;
namespace fs = std::filesystem;

namespace {
const char* kConfig = R"(run:
  seed: 4
  threads: 1
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 256
  synthetic_shape: [1, 16, 16]
model:
  kind: mlp
  hidden: [256, 256]
optimizer:
  kind: sgd
  lr: 0.05
train:
  steps: 3000
  eval_every: 1000
  log_every: 100
checkpoint:
  every: 500
)";
}  // namespace

TEST_CASE("a second process started as the same worker refuses, the first trains alone", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string cmd = train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str("run");
  const fs::path worker = dir.path() / "run" / "worker-000";
  Child first(cmd, dir, "first");
  REQUIRE(wait_until([&] { return fs::exists(worker / "metrics.jsonl") || !first.running(); }, 120));
  REQUIRE(first.running());
  auto second = run_command(cmd, dir);
  CHECK(second.exit_code == 2);
  CHECK(second.err.find("already training") != std::string::npos);
  CHECK(second.err.find("pid " + std::to_string(first.pid())) != std::string::npos);
  CHECK(first.wait() == 0);
  // One run's lines only: a single done, steps strictly increasing.
  CHECK(read_events(worker / "metrics.jsonl", "done").size() == 1);
  const auto train = read_events(worker / "metrics.jsonl", "train");
  REQUIRE(train.size() >= 2);  // an order to check
  std::int64_t last = -1;
  for (const auto& e : train) {
    CHECK(e.at("step").get<std::int64_t>() > last);
    last = e.at("step").get<std::int64_t>();
  }
  CHECK_FALSE(fs::exists(worker / "owner"));  // released on exit
}
