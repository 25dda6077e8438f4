// Process-level codistillation: real workers exchanging checkpoints through a run directory.
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/poison.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(run:
  seed: 3
  threads: 1
  workers: 2
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
  steps: 600
  eval_every: 200
  log_every: 50
checkpoint:
  every: 50
  keep: 3
codistill:
  enabled: true
  burn_in: 100
  reload_every: 50
  temperature: 2.0
)";

std::string worker_cmd(const TempDir& dir, int w, const std::string& run, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " --worker " +
         std::to_string(w) + " " + extra;
}

fs::path metrics_of(const TempDir& dir, const std::string& run, int w) {
  return dir.path() / run / ("worker-00" + std::to_string(w)) / "metrics.jsonl";
}

// Poisons every checkpoint in `folder` (its classifier, fc3/weight of kConfig's MLP).
void poison_checkpoints(const fs::path& folder) {
  int poisoned = 0;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".h5") {
      poison_checkpoint(e.path().string(), "fc3/weight");
      ++poisoned;
    }
  REQUIRE(poisoned > 0);
}

}  // namespace

TEST_CASE("two workers exchange checkpoints and distill from each other after burn-in", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Long enough (a few seconds) that the two runs overlap whatever their start-up times.
  const std::string longer = "--set train.steps=4000 --set model.hidden=[256,256] --set train.eval_every=1000";
  Child w0(worker_cmd(dir, 0, "run", longer), dir, "w0");
  Child w1(worker_cmd(dir, 1, "run", longer), dir, "w1");
  REQUIRE(w0.wait() == 0);
  REQUIRE(w1.wait() == 0);
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    auto m = metrics_of(dir, "run", w);
    auto teachers = read_events(m, "teacher");
    REQUIRE(!teachers.empty());
    int accepted = 0;
    for (const auto& t : teachers) {
      INFO(t.dump());
      CHECK(t.at("peer") == 1 - w);
      CHECK(t.at("peer_step").get<std::int64_t>() > 0);
      CHECK(t.at("load_ms").get<double>() >= 0);
      // The teacher gate (on by default) scored it. An honest peer is refused only by the
      // ratio: while it is far behind this worker (async: a peer that started late on a
      // loaded machine is still near its initial loss when this one is not), or at small
      // losses where the 128-example probe puts it above twice this worker's.
      CHECK(std::isfinite(t.at("probe_loss").get<double>()));
      CHECK(t.at("probe_ms").get<double>() >= 0);
      if (t.at("refused") == false) {
        ++accepted;
      } else {
        CHECK_THAT(t.at("reason").get<std::string>(), Catch::Contains("max_ratio"));
      }
    }
    CHECK(accepted >= 1);
    bool distilled = false;
    for (const auto& e : read_events(m, "train")) {
      const auto step = e.at("step").get<std::int64_t>();
      if (step <= 100) {
        CHECK(e.at("distill") == 0.0);  // before burn-in: no soft term
      } else if (e.at("teachers") == 1) {
        distilled = true;
        CHECK(e.at("distill").get<double>() > 0);
        // Own step minus the teacher's: negative when the peer runs ahead (async mode).
        CHECK(e.at("staleness").is_number_integer());
      }
    }
    CHECK(distilled);
    auto evals = read_events(m, "eval");
    REQUIRE(!evals.empty());
    const auto& churn = evals.back().at("churn");
    REQUIRE(churn.contains(std::to_string(1 - w)));
    CHECK(churn.at(std::to_string(1 - w)).get<double>() >= 0);
    CHECK(churn.at(std::to_string(1 - w)).get<double>() < 0.5);
    // The final checkpoint records the teacher in use.
    ckpt::RunStore s(dir.str("run"));
    auto meta = ckpt::read_meta(s.checkpoint_path(w, 4000));
    REQUIRE(meta.teacher_steps.size() == 1);
    CHECK(meta.teacher_steps[0].worker == 1 - w);
  }
}

TEST_CASE("a worker whose peer is killed mid-run finishes alone with a warning", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Worker 0 trains ten times longer, so that its peer's death is in the middle of its run.
  Child w0(worker_cmd(dir, 0, "run", "--set train.steps=6000"), dir, "w0");
  Child w1(worker_cmd(dir, 1, "run", "--set train.steps=6000"), dir, "w1");
  ckpt::RunStore s(dir.str("run"));
  REQUIRE(wait_until([&] { return s.checkpoints(1).size() >= 3 || !w1.running(); }, 120));
  w1.signal(SIGKILL);
  CHECK(w1.wait() == 128 + SIGKILL);
  REQUIRE(w0.wait() == 0);
  std::string log = read_text(dir.path() / "w0.out");
  CHECK(log.find("has published nothing since step") != std::string::npos);
  auto done = read_events(metrics_of(dir, "run", 0), "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("step") == 6000);
}

TEST_CASE("a corrupted peer checkpoint is skipped for the next freshest", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Worker 1 runs first (alone: no teacher ever appears) and leaves checkpoints 500..600.
  REQUIRE(run_command(worker_cmd(dir, 1, "run"), dir).exit_code == 0);
  ckpt::RunStore s(dir.str("run"));
  // Its teacher file of that step too, which the peer would read first.
  for (const auto& newest : {s.checkpoint_path(1, 600), s.teacher_path(1, 600)})
    fs::resize_file(newest, fs::file_size(newest) / 2);
  auto r = run_command(worker_cmd(dir, 0, "run"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("skipped") != std::string::npos);
  auto teachers = read_events(metrics_of(dir, "run", 0), "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("peer_step") == 550);
}

TEST_CASE("a peer whose valid checkpoints hold a broken model is refused by the teacher gate", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Worker 1 runs first, alone, and leaves checkpoints 500..600, which are then poisoned.
  // In `open` the same without the gate (part of the run's config, which its workers share).
  const std::string no_gate = "--set codistill.gate.enabled=false";
  REQUIRE(run_command(worker_cmd(dir, 1, "run"), dir).exit_code == 0);
  REQUIRE(run_command(worker_cmd(dir, 1, "open", no_gate), dir).exit_code == 0);
  poison_checkpoints(dir.path() / "run" / "worker-001");
  poison_checkpoints(dir.path() / "open" / "worker-001");
  SECTION("with the gate: refused once, and the worker trains as if alone") {
    auto r = run_command(worker_cmd(dir, 0, "run"), dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("teacher refused: peer 1 at step 600") && Catch::Contains("max_ratio"));
    // The refused step stays refused: the peer publishes nothing newer, so it is not
    // loaded again at the next reloads.
    auto teachers = read_events(metrics_of(dir, "run", 0), "teacher");
    REQUIRE(teachers.size() == 1);
    CHECK(teachers[0].at("refused") == true);
    CHECK(teachers[0].at("peer_step") == 600);
    CHECK_THAT(teachers[0].at("reason").get<std::string>(), Catch::Contains("max_ratio"));
    CHECK(teachers[0].at("probe_loss").get<double>() > 2 * teachers[0].at("own_probe_loss").get<double>());
    for (const auto& e : read_events(metrics_of(dir, "run", 0), "train")) CHECK(e.at("teachers") == 0);
    // Bit for bit the run of a worker with codistillation off.
    REQUIRE(run_command(worker_cmd(dir, 0, "alone", "--set codistill.enabled=false"), dir).exit_code == 0);
    require_identical(ckpt::RunStore(dir.str("run")).checkpoint_path(0, 600),
                      ckpt::RunStore(dir.str("alone")).checkpoint_path(0, 600));
  }
  SECTION("without it (codistill.gate.enabled false) the broken peer teaches") {
    auto r = run_command(worker_cmd(dir, 0, "open", no_gate), dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto teachers = read_events(metrics_of(dir, "open", 0), "teacher");
    REQUIRE(!teachers.empty());
    CHECK(!teachers[0].contains("refused"));
    CHECK(teachers[0].at("peer_step") == 600);
  }
}

// A teacher is rebuilt from its checkpoint's own model attribute: what must match is the
// input shape and the classes, not the architecture. The students run in sync mode: an
// async student adopts a teacher only when its watcher thread has loaded one, which on a
// busy machine can come after a 200-step run has ended (a CI failure).
TEST_CASE("a peer of another architecture teaches, one with other inputs is refused", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string peer = "--set train.steps=200 --set checkpoint.keep=10";
  const std::string student = " --set train.steps=200 --set codistill.mode=sync --set codistill.sync_timeout_s=5";
  REQUIRE(run_command(worker_cmd(dir, 1, "run", peer), dir).exit_code == 0);
  // Another config needs another run dir: copies of worker 1's checkpoints stand in for
  // a peer there.
  auto copy_peer = [&](const std::string& run, const std::string& from) {
    fs::create_directories(dir.path() / run / "worker-001");
    for (const auto& f : ckpt::RunStore(dir.str(from)).checkpoints(1))
      fs::copy_file(f.path, dir.path() / run / "worker-001" / fs::path(f.path).filename());
  };
  copy_peer("cnn", "run");
  // A cnn student ([1,8,8] inputs, 10 classes) learns from the mlp peer.
  auto r = run_command(worker_cmd(dir, 0, "cnn",
                                  "--set model.kind=cnn --set model.channels=[4] --set model.kernel_size=3 "
                                  "--set model.hidden=[]" + student),
                       dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto teachers = read_events(metrics_of(dir, "cnn", 0), "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("peer") == 1);
  auto trains = read_events(metrics_of(dir, "cnn", 0), "train");
  CHECK(trains.back().at("distill").get<double>() > 0);

  // Inputs of another shape: refused, naming both models.
  REQUIRE(run_command(worker_cmd(dir, 1, "wide", peer + " --set data.synthetic_shape=[1,6,6]"), dir).exit_code == 0);
  copy_peer("narrow", "wide");
  auto refused = run_command(worker_cmd(dir, 0, "narrow", student), dir);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("cannot teach this worker") && Catch::Contains("[1, 6, 6]") &&
                              Catch::Contains("[1, 8, 8]"));
}

// A mixed cohort in one run (Deep Mutual Learning's setting): worker 1 trains a CNN
// (worker_models) beside worker 0's MLP; each learns from the other.
TEST_CASE("an mlp and a cnn of one run codistill with each other", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", std::string(kConfig) +
                                        "worker_models:\n  1:\n    kind: cnn\n    channels: [4]\n"
                                        "    kernel_size: 3\n    hidden: []\n");
  const std::string sync = "--set codistill.mode=sync --set train.steps=300";
  Child w0(worker_cmd(dir, 0, "run", sync), dir, "w0");
  Child w1(worker_cmd(dir, 1, "run", sync), dir, "w1");
  REQUIRE(w0.wait() == 0);
  REQUIRE(w1.wait() == 0);
  ckpt::RunStore store(dir.str("run"));
  CHECK_THAT(ckpt::read_meta(store.checkpoint_path(0, 300)).model, Catch::Contains("kind: mlp"));
  CHECK_THAT(ckpt::read_meta(store.checkpoint_path(1, 300)).model, Catch::Contains("kind: cnn"));
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    auto teachers = read_events(metrics_of(dir, "run", w), "teacher");
    REQUIRE(!teachers.empty());
    CHECK(teachers.back().at("peer") == 1 - w);
    CHECK(read_events(metrics_of(dir, "run", w), "train").back().at("distill").get<double>() > 0);
  }
}

TEST_CASE("sync mode: two runs of the same 2-worker config end bit-identical", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string sync = "--set codistill.mode=sync --set train.steps=300";
  for (std::string run : {"a", "b"}) {
    Child w0(worker_cmd(dir, 0, run, sync), dir, run + "0");
    Child w1(worker_cmd(dir, 1, run, sync), dir, run + "1");
    REQUIRE(w0.wait() == 0);
    REQUIRE(w1.wait() == 0);
  }
  for (int w = 0; w < 2; ++w) {
    auto a = ckpt::read(ckpt::RunStore(dir.str("a")).checkpoint_path(w, 300));
    auto b = ckpt::read(ckpt::RunStore(dir.str("b")).checkpoint_path(w, 300));
    CHECK(a.meta.content_digest == b.meta.content_digest);
    CHECK(a.meta.teacher_steps == b.meta.teacher_steps);
    CHECK(read_events(metrics_of(dir, "a", w), "teacher").size() >= 3);
  }
}

TEST_CASE("sync mode: a worker killed and restarted still ends bit-identical", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string sync = "--set codistill.mode=sync --set train.steps=2000 --set model.hidden=[256,256] "
                           "--set codistill.sync_timeout_s=90";
  {
    Child w0(worker_cmd(dir, 0, "whole", sync), dir, "whole0");
    Child w1(worker_cmd(dir, 1, "whole", sync), dir, "whole1");
    REQUIRE(w0.wait() == 0);
    REQUIRE(w1.wait() == 0);
  }
  {
    Child w0(worker_cmd(dir, 0, "killed", sync), dir, "killed0");
    {
      Child w1(worker_cmd(dir, 1, "killed", sync), dir, "killed1");
      ckpt::RunStore s(dir.str("killed"));
      REQUIRE(wait_until([&] { return s.checkpoints(1).size() >= 4 || !w1.running(); }, 120));
      REQUIRE(w1.running());
      w1.signal(SIGKILL);
      CHECK(w1.wait() == 128 + SIGKILL);
    }
    // Worker 0 waits for its peer meanwhile; the restarted worker 1 resumes with the
    // teachers its checkpoint names.
    Child again(worker_cmd(dir, 1, "killed", sync), dir, "again1");
    CHECK(again.wait() == 0);
    CHECK(w0.wait() == 0);
  }
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    auto a = ckpt::read(ckpt::RunStore(dir.str("whole")).checkpoint_path(w, 2000));
    auto b = ckpt::read(ckpt::RunStore(dir.str("killed")).checkpoint_path(w, 2000));
    CHECK(a.meta.content_digest == b.meta.content_digest);
  }
}

TEST_CASE("teacher files: a peer's are loaded when present, its checkpoints otherwise", "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Worker 1 runs first, alone, and publishes checkpoints 500..600 with bf16 teacher files
  // beside them (retained with them); in `plain` it publishes none. (The settings are part
  // of each run's config, which its workers share.)
  const std::string bf16 = "--set checkpoint.teacher_dtype=bf16", none = "--set checkpoint.teacher_dtype=none";
  REQUIRE(run_command(worker_cmd(dir, 1, "run", bf16), dir).exit_code == 0);
  REQUIRE(run_command(worker_cmd(dir, 1, "plain", none), dir).exit_code == 0);
  ckpt::RunStore run(dir.str("run")), plain(dir.str("plain"));
  std::vector<std::int64_t> teacher_steps, checkpoint_steps;
  for (const auto& f : run.teacher_files(1)) teacher_steps.push_back(f.step);
  for (const auto& f : run.checkpoints(1)) checkpoint_steps.push_back(f.step);
  CHECK(teacher_steps == std::vector<std::int64_t>{500, 550, 600});
  CHECK(checkpoint_steps == teacher_steps);
  CHECK(plain.teacher_files(1).empty());
  for (const auto& e : read_events(metrics_of(dir, "run", 1), "checkpoint")) {
    CHECK(e.at("teacher_bytes").get<std::int64_t>() > 0);
    CHECK(e.at("teacher_bytes").get<std::int64_t>() < e.at("bytes").get<std::int64_t>());
  }
  const auto ckpt_bytes = static_cast<std::int64_t>(fs::file_size(run.checkpoint_path(1, 600)));

  REQUIRE(run_command(worker_cmd(dir, 0, "run", bf16), dir).exit_code == 0);
  auto teachers = read_events(metrics_of(dir, "run", 0), "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("peer_step") == 600);
  CHECK(teachers.front().at("file") == "teacher");
  // SGD with momentum: the checkpoint holds the parameters twice in float32, the bf16
  // teacher file once in bfloat16.
  CHECK(teachers.front().at("bytes_read").get<std::int64_t>() * 3 < ckpt_bytes);
  CHECK(run.teacher_files(0).size() == 3);  // worker 0's own

  REQUIRE(run_command(worker_cmd(dir, 0, "plain", none), dir).exit_code == 0);
  teachers = read_events(metrics_of(dir, "plain", 0), "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("peer_step") == 600);
  CHECK(teachers.front().at("file") == "checkpoint");
  CHECK(teachers.front().at("bytes_read").get<std::int64_t>() * 3 > ckpt_bytes * 2);
}
