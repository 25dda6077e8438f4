// Process-level elastic cohort (docs/training.md, "An elastic cohort"): workers that join a
// running run, retire from it, and sync mode that never waits for a retired peer. The
// cohort's rules alone: tests/codistill/teachers/test_cohort.cpp.
#include <catch2/catch.hpp>

#include <filesystem>

#include "checkpoint/store.hpp"
#include "codistill/persist/membership.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(run:
  seed: 5
  threads: 1
  workers: 2
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 512
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [64, 64]
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 400
  eval_every: 0
  log_every: 50
checkpoint:
  every: 50
  keep: 3
codistill:
  enabled: true
  burn_in: 50
  reload_every: 50
)";

std::string worker_cmd(const TempDir& dir, int w, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str("run") + " --worker " +
         std::to_string(w) + " " + extra;
}

fs::path worker_dir(const TempDir& dir, int w) { return dir.path() / "run" / ("worker-00" + std::to_string(w)); }
fs::path metrics_of(const TempDir& dir, int w) { return worker_dir(dir, w) / "metrics.jsonl"; }

std::int64_t newest_checkpoint(const TempDir& dir, int w) {
  const auto files = ckpt::RunStore(dir.str("run")).checkpoints(w);
  return files.empty() ? -1 : files.back().step;
}

}  // namespace

TEST_CASE("sync mode never waits for a peer that retired, and the retired worker does not start again", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Without the retirement worker 0 would wait for worker 1's step-250 checkpoint until the
  // timeout and fail (exit 1).
  const std::string sync = "--set codistill.mode=sync --set codistill.sync_timeout_s=60";
  Child w0(worker_cmd(dir, 0, sync), dir, "w0");
  Child w1(worker_cmd(dir, 1, sync + " --set run.retire_at=200"), dir, "w1");
  REQUIRE(w1.wait() == 0);
  REQUIRE(w0.wait() == 0);
  // Worker 1: its final checkpoint, then the marker.
  CHECK(newest_checkpoint(dir, 1) == 200);
  const auto marker = codistill::read_marker(worker_dir(dir, 1).string(), codistill::kRetiredMarker);
  REQUIRE(marker);
  CHECK(marker->step == 200);
  CHECK(marker->reason == "run.retire_at");
  const auto done = read_events(metrics_of(dir, 1), "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("step") == 200);
  CHECK(done[0].at("retired") == true);
  CHECK(done[0].at("interrupted") == false);
  // Worker 0: every exchange; the last ones do not wait for worker 1.
  CHECK(newest_checkpoint(dir, 0) == 400);
  bool saw_retired = false;
  for (const auto& e : read_events(metrics_of(dir, 0), "cohort"))
    saw_retired |= e.at("retired") == nlohmann::json::array({1});
  CHECK(saw_retired);
  const auto syncs = read_events(metrics_of(dir, 0), "sync");
  REQUIRE(syncs.size() == 6);  // before steps 100, 150, ..., 350
  for (const auto& e : syncs) {
    INFO(e.dump());
    CHECK(e.at("left_behind").empty());
    const auto step = e.at("step").get<std::int64_t>();
    if (step <= 250) CHECK(e.at("loaded") == nlohmann::json::array({1}));  // up to its last, step 200
    if (step >= 300) CHECK(e.at("not_waited") == nlohmann::json::array({1}));
  }
  // Started again, the retired worker says so and changes nothing.
  const auto before = read_text(metrics_of(dir, 1));
  const ProcessResult again = run_command(worker_cmd(dir, 1, sync + " --set run.retire_at=200"), dir);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out + again.err, Catch::Contains("has retired at step 200") && Catch::Contains("nothing to do"));
  CHECK(read_text(metrics_of(dir, 1)) == before);
}

TEST_CASE("a retirement marker put in a running worker's folder retires it", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  Child w0(worker_cmd(dir, 0, "--set run.workers=1 --set codistill.enabled=false --set train.steps=1000000"), dir,
           "w0");
  REQUIRE(wait_until([&] { return newest_checkpoint(dir, 0) >= 100; }, 120));
  write_text(worker_dir(dir, 0) / "retired", "");  // by hand, as a user would
  REQUIRE(w0.wait() == 0);
  const auto marker = codistill::read_marker(worker_dir(dir, 0).string(), codistill::kRetiredMarker);
  REQUIRE(marker);
  CHECK(marker->reason == "marker");
  CHECK(marker->step == newest_checkpoint(dir, 0));
  CHECK(marker->step < 1000000);
  const auto done = read_events(metrics_of(dir, 0), "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("retired") == true);
}

TEST_CASE("a worker joins a running run from its peers' freshest checkpoint and learns from them", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Long enough (seconds) that the joiner starts while the others still run.
  const std::string longer = "--set train.steps=3000 --set model.hidden=[256,256]";
  Child w0(worker_cmd(dir, 0, longer), dir, "w0");
  Child w1(worker_cmd(dir, 1, longer), dir, "w1");
  REQUIRE(wait_until([&] { return newest_checkpoint(dir, 0) >= 300; }, 120));
  Child w2(worker_cmd(dir, 2, longer + " --workers 3 --set model.init_from=peers"), dir, "w2");
  REQUIRE(w2.wait() == 0);
  REQUIRE(w0.wait() == 0);
  REQUIRE(w1.wait() == 0);
  // It started at a peer's checkpoint step, said so, and finished with the others.
  const auto joined = codistill::read_marker(worker_dir(dir, 2).string(), codistill::kJoinedMarker);
  REQUIRE(joined);
  const std::int64_t k = joined->step;
  CHECK(k >= 300);
  CHECK(k % 50 == 0);
  CHECK_THAT(joined->reason, Catch::Contains("ckpt-"));
  const auto trains = read_events(metrics_of(dir, 2), "train");
  REQUIRE(!trains.empty());
  CHECK(trains.front().at("step").get<std::int64_t>() == k + 50);
  CHECK(newest_checkpoint(dir, 2) == 3000);
  // Its first teacher within a reload period or two of joining (the load runs beside steps).
  const auto teachers = read_events(metrics_of(dir, 2), "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("step").get<std::int64_t>() <= k + 100);
  // Started again once finished: nothing to do.
  CHECK(run_command(worker_cmd(dir, 2, longer + " --workers 3 --set model.init_from=peers"), dir).exit_code == 0);
}
