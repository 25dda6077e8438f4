// codistill-train on CUDA as a real process: an unusable device is a clear runtime error
// (runs everywhere), and where a GPU is present ([cuda]) a worker trains, checkpoints and
// resumes on it, and two workers codistill on it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <iostream>
#include <string>

#include "checkpoint/store.hpp"
#include "kernels/cuda/memory.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace cuda = codistill::kernels::cuda;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(run:
  seed: 3
  threads: 1
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 1024
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [64, 64]
  dropout: 0.1
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 300
  eval_every: 100
  log_every: 25
checkpoint:
  every: 100
)";

std::string train_cmd(const TempDir& dir, const std::string& extra) {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str("run") + " " + extra;
}

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

bool skip_without_cuda() {
  if (cuda::device_count() > 0) return false;
  std::cout << "skipped: no CUDA device" << std::endl;
  SUCCEED("no CUDA device");
  return true;
}

}  // namespace

TEST_CASE("codistill-train on a CUDA device it cannot use exits 1 saying why, before writing anything",
          "[process]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Without a GPU (or without CUDA in this build) plain `cuda`; with GPUs, one index too many.
  const int n = cuda::device_count();
  const std::string device = n == 0 ? "cuda" : "cuda:" + std::to_string(n);
  const std::string why = !cuda::built_with_cuda() ? "no CUDA backend"
                          : n == 0                 ? "no CUDA device is visible"
                                                   : "device(s) are visible";
  for (const std::string& how : {"--device " + device, "--set device=" + device}) {
    INFO(how);
    auto r = run_command(train_cmd(dir, how), dir);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("device '" + device + "'") != std::string::npos);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path() / "run"));
  }
  // The same config on the CPU is fine (the failure above was the device, nothing else).
  auto ok = run_command(train_cmd(dir, "--device cpu --set train.steps=5"), dir);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("model.memory_format nhwc on CUDA is a configuration error naming the key (exit 2)", "[cuda][process]") {
  if (skip_without_cuda()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", R"(run:
  seed: 3
  threads: 1
data:
  kind: synthetic
  batch_size: 16
  synthetic_train: 256
  synthetic_test: 64
  synthetic_shape: [1, 8, 8]
model:
  kind: resnet
  channels: [4, 8]
  blocks: 1
  hidden: []
  memory_format: nhwc
train:
  steps: 5
)");
  ProcessResult r = run_command(train_cmd(dir, "--device cuda"), dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("model.memory_format") != std::string::npos);
  CHECK(r.err.find("no channels-last image ops") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000"));  // refused before anything is written
  // auto picks NCHW on CUDA: the same model trains.
  ProcessResult ok = run_command(train_cmd(dir, "--device cuda --set model.memory_format=auto"), dir);
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("codistill-train --device cuda learns the synthetic task, checkpoints and resumes", "[cuda][process]") {
  if (skip_without_cuda()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  auto r = run_command(train_cmd(dir, "--device cuda"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("device cuda:0") != std::string::npos);
  const fs::path metrics = dir.path() / "run" / "worker-000" / "metrics.jsonl";
  auto train = read_events(metrics, "train");
  REQUIRE(train.size() == 12);
  CHECK(train.back().at("loss").get<double>() < 0.6 * train.front().at("loss").get<double>());
  auto done = read_events(metrics, "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("accuracy").get<double>() > 0.5);  // chance is 0.1
  CHECK(read_events(metrics, "checkpoint").size() == 3);

  // The checkpoints are ordinary ones: verified, and read by the CPU tools.
  codistill::checkpoint::RunStore store(dir.str("run"));
  const std::string last = store.checkpoint_path(0, 300);
  auto verify = run_command(inspect_exe() + " verify " + last, dir);
  CHECK(verify.exit_code == 0);
  auto eval = run_command(inspect_exe() + " eval " + last + " --json", dir);
  CHECK(eval.exit_code == 0);

  // Started again on the same device, the finished worker finds its last checkpoint, says it
  // has nothing to do and exits 0 (as on the CPU: test_owner_process).
  auto again = run_command(train_cmd(dir, "--device cuda"), dir);
  INFO(again.out << again.err);
  CHECK(again.exit_code == 0);
  CHECK((again.out + again.err).find("has finished") != std::string::npos);
}

TEST_CASE("two workers codistill on CUDA: teachers loaded to the device, distillation after burn-in",
          "[cuda][process]") {
  if (skip_without_cuda()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Async mode (the watcher thread stages each teacher in pinned memory, the trainer adopts
  // it once its copy is done), long enough that the two runs overlap whatever their start-up
  // times; the in-process engine test covers sync mode.
  const std::string common =
      "--device cuda --workers 2 --set codistill.enabled=true --set codistill.burn_in=100 "
      "--set codistill.reload_every=50 --set checkpoint.every=50 --set train.steps=4000 "
      "--set model.hidden=[256,256] --set train.eval_every=1000";
  Child w0(train_cmd(dir, common + " --worker 0"), dir, "w0");
  Child w1(train_cmd(dir, common + " --worker 1"), dir, "w1");
  REQUIRE(w0.wait() == 0);
  REQUIRE(w1.wait() == 0);
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    const fs::path metrics = dir.path() / "run" / ("worker-00" + std::to_string(w)) / "metrics.jsonl";
    // On a failure, the worker's own account (its log and its eval/teacher events).
    std::string tag = "w";  // appended: GCC 12's -Wrestrict false positive on "w" + to_string
    tag += std::to_string(w);
    std::string account = read_text(dir.path() / (tag + ".out"));
    account += read_text(dir.path() / (tag + ".err"));
    for (const char* kind : {"teacher", "eval", "done"})
      for (const auto& e : read_events(metrics, kind)) account += e.dump() + "\n";
    INFO(account);
    auto teachers = read_events(metrics, "teacher");
    REQUIRE_FALSE(teachers.empty());
    for (const auto& t : teachers) CHECK(t.at("peer") == 1 - w);
    bool distilled = false;
    for (const auto& e : read_events(metrics, "train")) {
      if (e.at("step").get<std::int64_t>() <= 100) CHECK(e.at("distill") == 0.0);
      else if (e.at("teachers") == 1 && e.at("distill").get<double>() > 0) distilled = true;
    }
    CHECK(distilled);
    const nlohmann::json churn = read_events(metrics, "eval").back().at("churn");  // a copy: the vector is a temporary
    REQUIRE(churn.contains(std::to_string(1 - w)));
    CHECK(churn.at(std::to_string(1 - w)).get<double>() < 0.5);
    auto done = read_events(metrics, "done");
    REQUIRE(done.size() == 1);
    CHECK(done[0].at("accuracy").get<double>() > 0.5);
  }
}
