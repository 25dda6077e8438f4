// Fixed teachers (codistill.fixed_teachers): frozen checkpoints of another run, of another
// architecture, distilled into a student from its first step; the files chosen are
// recorded so that a killed and resumed student ends bit-identical; bad entries are
// refused naming them.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include "checkpoint/store.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/poison.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(run:
  seed: 5
  threads: 1
  workers: 1
data:
  kind: synthetic
  batch_size: 32
  synthetic_train: 2048
  synthetic_test: 512
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [16]
optimizer:
  kind: sgd
  lr: 0.05
train:
  steps: 300
  eval_every: 100
  log_every: 20
checkpoint:
  every: 50
  keep: 10
codistill:
  temperature: 2.0
  weight: 1.0
)";

std::string train(const TempDir& dir, const std::string& run, const std::string& extra) {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

// A 2-worker teacher run of small CNNs (another architecture than the MLP students).
void make_teachers(const TempDir& dir) {
  const std::string cnn = "--set model.kind=cnn --set model.channels=[4] --set model.kernel_size=3 "
                          "--set model.hidden=[] --set run.workers=2 --set train.steps=200";
  for (int w = 0; w < 2; ++w) {
    auto r = run_command(train(dir, "teachers", cnn + " --worker " + std::to_string(w)), dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
  }
}

fs::path metrics(const TempDir& dir, const std::string& run) { return dir.path() / run / "worker-000" / "metrics.jsonl"; }

}  // namespace

TEST_CASE("fixed teachers of another architecture teach a student from its first step", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  make_teachers(dir);
  const std::string fixed = "--set codistill.fixed_teachers=[" + dir.str("teachers") + "]";
  auto r = run_command(train(dir, "student", fixed), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  // A run directory stands for its workers' freshest valid checkpoints (step 200 each).
  auto teachers = read_events(metrics(dir, "student"), "teacher");
  REQUIRE(teachers.size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(teachers[i].at("peer") == -1 - i);
    CHECK(teachers[i].at("peer_step") == 200);
    CHECK(teachers[i].at("step") == 0);
  }
  auto trains = read_events(metrics(dir, "student"), "train");
  REQUIRE(!trains.empty());
  CHECK(trains.front().at("step") == 20);
  CHECK(trains.front().at("teachers") == 2);
  CHECK(trains.front().at("distill").get<double>() > 0);
  auto evals = read_events(metrics(dir, "student"), "eval");
  REQUIRE(!evals.empty());
  CHECK(evals.back().at("churn").contains("fixed-0"));
  CHECK(evals.back().at("churn").contains("fixed-1"));
  const std::string record = read_text(dir.path() / "student" / "worker-000" / "fixed_teachers.json");
  CHECK_THAT(record, Catch::Contains("worker-001/ckpt-000000200.h5") && Catch::Contains("content_digest"));

  // The same student without teachers learns something else (the teachers really enter).
  auto alone = run_command(train(dir, "alone", ""), dir);
  REQUIRE(alone.exit_code == 0);
  CHECK(read_events(metrics(dir, "alone"), "train").front().at("distill").get<double>() == 0);
}

TEST_CASE("a student with fixed teachers killed and resumed ends bit-identical", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  make_teachers(dir);
  // One worker directory and one checkpoint file, alongside live-peer settings left off.
  const std::string fixed = "--set codistill.fixed_teachers=[" + dir.str("teachers/worker-000") + "," +
                            dir.str("teachers/worker-001/ckpt-000000150.h5") + "] --set train.steps=1500";
  auto whole = run_command(train(dir, "whole", fixed), dir);
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  {
    Child victim(train(dir, "killed", fixed), dir, "victim");
    ckpt::RunStore s(dir.str("killed"));
    REQUIRE(wait_until([&] { return s.checkpoints(0).size() >= 2 || !victim.running(); }, 120));
    REQUIRE(victim.running());
    victim.signal(SIGKILL);
    CHECK(victim.wait() == 128 + SIGKILL);
  }
  auto resumed = run_command(train(dir, "killed", fixed), dir);
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("resuming from") != std::string::npos);
  require_identical(ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 1500),
                    ckpt::RunStore(dir.str("killed")).checkpoint_path(0, 1500));

  // A resumed student takes the recorded files, not whatever is freshest now: with the
  // recorded teacher gone it stops naming it instead of silently learning from another.
  {
    Child victim(train(dir, "again", fixed), dir, "again");
    ckpt::RunStore s(dir.str("again"));
    REQUIRE(wait_until([&] { return s.checkpoints(0).size() >= 1 || !victim.running(); }, 120));
    REQUIRE(victim.running());
    victim.signal(SIGKILL);
    victim.wait();
  }
  fs::remove(dir.path() / "teachers" / "worker-000" / "ckpt-000000200.h5");
  auto gone = run_command(train(dir, "again", fixed), dir);
  CHECK(gone.exit_code == 1);
  CHECK_THAT(gone.err, Catch::Contains("fixed teacher") && Catch::Contains("worker-000/ckpt-000000200.h5"));
}

TEST_CASE("fixed teacher entries that cannot teach are refused naming them", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  SECTION("a path that does not exist: a configuration error") {
    auto r = run_command(train(dir, "s", "--set codistill.fixed_teachers=[" + dir.str("nowhere") + "]"), dir);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("codistill.fixed_teachers") && Catch::Contains("nowhere") &&
                          Catch::Contains("no such file"));
  }
  SECTION("a directory without checkpoints") {
    fs::create_directories(dir.path() / "empty" / "worker-000");
    auto r = run_command(train(dir, "s", "--set codistill.fixed_teachers=[" + dir.str("empty") + "]"), dir);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("no valid checkpoint"));
  }
  SECTION("a damaged checkpoint file") {
    write_text(dir.path() / "bad.h5", "not hdf5");
    auto r = run_command(train(dir, "s", "--set codistill.fixed_teachers=[" + dir.str("bad.h5") + "]"), dir);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("not a valid checkpoint"));
  }
  SECTION("a valid teacher whose model is broken: refused by the teacher gate") {
    REQUIRE(run_command(train(dir, "t", "--set train.steps=50"), dir).exit_code == 0);
    const std::string file = ckpt::RunStore(dir.str("t")).checkpoint_path(0, 50);
    poison_checkpoint(file, "fc2/weight");
    auto r = run_command(train(dir, "s", "--set codistill.fixed_teachers=[" + file + "]"), dir);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("codistill.fixed_teachers") && Catch::Contains(file) &&
                          Catch::Contains("refused by the teacher gate") && Catch::Contains("max_ratio"));
    auto open = run_command(train(dir, "o", "--set codistill.fixed_teachers=[" + file + "] --set train.steps=20 "
                                            "--set codistill.gate.enabled=false"), dir);
    CHECK(open.exit_code == 0);
  }
  SECTION("a teacher predicting other classes") {
    auto t = run_command(train(dir, "five", "--set data.synthetic_classes=5 --set train.steps=50"), dir);
    REQUIRE(t.exit_code == 0);
    auto r = run_command(train(dir, "s", "--set codistill.fixed_teachers=[" + dir.str("five") + "]"), dir);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("cannot teach this worker") && Catch::Contains("predicts 5 classes"));
  }
}
