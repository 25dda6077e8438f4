// Process-level tests of model kind `layers`: codistill-train learns with a model written
// layer by layer, its checkpoints rebuild the model offline (codistill-inspect) and as a
// peer's teacher, a kill part-way through a checkpoint write resumes bit-exactly, and a
// layer list that does not fit the data exits 2 naming the entry.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/config/config_loader.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// A small residual CNN on 10 Gaussian classes in [1, 8, 8]: batchnorm (buffers), dropout
// (a random stream to resume) and an automatic projection shortcut.
const char* kConfig = R"(run:
  seed: 4
  threads: 2
data:
  kind: synthetic
  batch_size: 64
  synthetic_train: 4096
  synthetic_test: 1000
  synthetic_shape: [1, 8, 8]
model:
  kind: layers
  layers:
    - conv2d: {out_channels: 8, kernel: 3, padding: 1, bias: false}
    - batchnorm: {}
    - relu: {}
    - residual:
        layers:
          - conv2d: {out_channels: 16, kernel: 3, stride: 2, padding: 1}
          - relu: {}
    - flatten: {}
    - dropout: {p: 0.1}
    - linear: {out: 10}
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 300
  eval_every: 100
  log_every: 50
  eval_batch_size: 1000
checkpoint:
  every: 100
  keep: 5
)";

std::string cmd(const TempDir& dir, const std::string& run, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

}  // namespace

TEST_CASE("a layers model trains, and its checkpoint alone rebuilds it", "[process][layers]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  auto r = run_command(cmd(dir, "run"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path worker = dir.path() / "run" / "worker-000";
  auto done = read_events(worker / "metrics.jsonl", "done");
  REQUIRE(done.size() == 1);
  const double accuracy = done[0].at("accuracy").get<double>();
  CHECK(accuracy > 0.5);  // chance is 0.1

  // The model attribute holds the layer list; the model built from it alone has the
  // checkpoint's fingerprint and its tensors.
  const std::string last = ckpt::RunStore(dir.str("run")).checkpoint_path(0, 300);
  const auto data = ckpt::read(last);
  CHECK(data.meta.model.find("\nlayers:\n  - conv2d: {out_channels: 8") != std::string::npos);
  codistill::ModelConfig mc = codistill::model_from_yaml(data.meta.model);
  codistill::Rng rng(1);
  codistill::Model model = codistill::build_model(mc, rng);
  CHECK(model.fingerprint() == data.meta.model_fingerprint);
  CHECK(data.find(ckpt::Section::params, "3_residual/shortcut/0_conv2d/weight") != nullptr);
  CHECK(data.find(ckpt::Section::buffers, "1_batchnorm/running_mean") != nullptr);

  // codistill-inspect rebuilds it offline and evaluates what the trainer evaluated.
  auto ev = run_command(inspect_exe() + " eval " + last + " --batch 1000 --json", dir);
  INFO(ev.out << ev.err);
  REQUIRE(ev.exit_code == 0);
  const auto doc = nlohmann::json::parse(ev.out);
  CHECK(doc["results"][0]["accuracy"].get<double>() == accuracy);
}

TEST_CASE("a layers model killed part-way through a checkpoint write resumes bit-identically", "[process][layers]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  auto whole = run_command(cmd(dir, "whole"), dir);
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  auto killed = run_command("env CODISTILL_FAULT_KILL_CHECKPOINT_STEPS=200 " + cmd(dir, "split"), dir);
  REQUIRE(killed.exit_code == 128 + SIGKILL);
  REQUIRE(ckpt::RunStore(dir.str("split")).checkpoints(0).back().step == 100);
  auto resumed = run_command(cmd(dir, "split"), dir);
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("resuming from") != std::string::npos);
  require_identical(ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 300),
                    ckpt::RunStore(dir.str("split")).checkpoint_path(0, 300));
}

TEST_CASE("a peer's layers checkpoint becomes a teacher", "[process][layers]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string two = "--workers 2 --set train.steps=200 --set codistill.enabled=true "
                          "--set codistill.reload_every=100 --set codistill.max_staleness=0";
  REQUIRE(run_command(cmd(dir, "run", two + " --worker 0"), dir).exit_code == 0);
  auto r = run_command(cmd(dir, "run", two + " --worker 1"), dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const fs::path metrics = dir.path() / "run" / "worker-001" / "metrics.jsonl";
  auto teachers = read_events(metrics, "teacher");
  REQUIRE(!teachers.empty());
  CHECK(teachers.front().at("peer") == 0);
  auto train = read_events(metrics, "train");
  CHECK(train.back().at("teachers") == 1);
}

TEST_CASE("a layer list that does not fit the data exits 2 naming the entry", "[process][layers]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  SECTION("linear after a convolution without a flatten") {
    auto r = run_command(cmd(dir, "run", "--set 'model.layers=[{conv2d: {out_channels: 4, kernel: 3}}, "
                                         "{linear: {out: 10}}]'"),
                         dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("model.layers[1]: linear gets input [4, 6, 6]") != std::string::npos);
    CHECK(r.err.find("put a flatten") != std::string::npos);
  }
  SECTION("the last layer is not the classes") {
    auto r = run_command(cmd(dir, "run", "--set data.synthetic_classes=7"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("model.layers[6]") != std::string::npos);
    CHECK(r.err.find("must end in [7]") != std::string::npos);
  }
  SECTION("an unknown layer type, at its line") {
    write_text(dir.path() / "bad.yaml", "model:\n  kind: layers\n  layers:\n    - flatten: {}\n    - dense: {out: 10}\n");
    auto r = run_command(train_exe() + " --config " + dir.str("bad.yaml") + " --run-dir " + dir.str("run"), dir);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("bad.yaml:5: model.layers[1]: unknown layer type 'dense'") != std::string::npos);
    CHECK(r.err.find("valid types: batchnorm, conv2d") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000" / "metrics.jsonl"));
}
