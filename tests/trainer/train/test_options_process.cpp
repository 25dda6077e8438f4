// Process-level tests of the training options: a run with augmentation and prefetch killed
// with SIGKILL and resumed ends bit-identical to an uninterrupted one; model.init_from errors
// are configuration errors (exit 2) that name the key.
#include <catch2/catch.hpp>

#include <cmath>

#include <csignal>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// Long enough to be killed part-way (a few seconds), epochs ending inside batches
// (8000 / 96), crop and flip on, prefetch on (asked for: auto leaves it off where the two
// threads take every core), dropout for generator state.
const char* kConfig = R"(run:
  seed: 6
  threads: 2
data:
  kind: synthetic
  prefetch: true
  batch_size: 96
  synthetic_train: 8000
  synthetic_test: 512
  synthetic_shape: [1, 16, 16]
  augment:
    crop_padding: 2
    flip: true
model:
  kind: mlp
  hidden: [256, 256]
  dropout: 0.1
optimizer:
  kind: sgd
  lr: 0.05
train:
  steps: 1200
  eval_every: 400
  log_every: 100
checkpoint:
  every: 100
  keep: 3
)";

std::string cmd(const TempDir& dir, const std::string& run, const std::string& extra = "") {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

}  // namespace

TEST_CASE("a run with augmentation killed with SIGKILL and restarted ends bit-identical", "[process][augment]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  auto whole = run_command(cmd(dir, "whole"), dir);
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  {
    Child victim(cmd(dir, "killed"), dir, "victim");
    ckpt::RunStore s(dir.str("killed"));
    REQUIRE(wait_until([&] { return s.checkpoints(0).size() >= 2 || !victim.running(); }, 120));
    REQUIRE(victim.running());
    victim.signal(SIGKILL);
    CHECK(victim.wait() == 128 + SIGKILL);
  }
  const auto before = ckpt::RunStore(dir.str("killed")).checkpoints(0);
  REQUIRE(!before.empty());
  CHECK(before.back().step < 1200);
  auto resumed = run_command(cmd(dir, "killed"), dir);
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("resuming from") != std::string::npos);
  require_identical(ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 1200),
                    ckpt::RunStore(dir.str("killed")).checkpoint_path(0, 1200));
  // Augmentation was on: without it the run ends elsewhere.
  auto plain = run_command(cmd(dir, "plain", "--set data.augment.crop_padding=0 --set data.augment.flip=false"), dir);
  REQUIRE(plain.exit_code == 0);
  CHECK(ckpt::read(ckpt::RunStore(dir.str("plain")).checkpoint_path(0, 1200)).meta.content_digest !=
        ckpt::read(ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 1200)).meta.content_digest);
}

TEST_CASE("model.init_from: another model or a missing path exits 2 naming the key", "[process][init]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  REQUIRE(run_command(cmd(dir, "source", "--set train.steps=100"), dir).exit_code == 0);

  const std::string from = " --set model.init_from=" + dir.str("source");
  auto other = run_command(cmd(dir, "tuned", "--set model.hidden=[128]" + from), dir);
  INFO(other.err);
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("configuration error: model.init_from:") != std::string::npos);
  CHECK(other.err.find("model.hidden [256, 256] vs [128]") != std::string::npos);

  auto missing = run_command(cmd(dir, "tuned", "--set model.init_from=" + dir.str("nowhere")), dir);
  INFO(missing.err);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("nowhere': no such file or directory") != std::string::npos);
  CHECK(!fs::exists(dir.path() / "tuned"));

  // The same model fine-tunes, and says where it started from.
  auto tuned = run_command(cmd(dir, "tuned", "--set train.steps=50 --set optimizer.lr=0.01" + from), dir);
  INFO(tuned.out << tuned.err);
  CHECK(tuned.exit_code == 0);
  CHECK(tuned.out.find("model initialized from") != std::string::npos);
}

TEST_CASE("optimizer.clip_grad_norm: train events carry the gradients' norm, clipped runs differ", "[process][clip]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  const std::string short_run = "--set train.steps=200 --set checkpoint.every=0 --set train.eval_every=0 ";
  REQUIRE(run_command(cmd(dir, "clipped", short_run + "--set optimizer.clip_grad_norm=0.05"), dir).exit_code == 0);
  REQUIRE(run_command(cmd(dir, "plain", short_run), dir).exit_code == 0);
  const auto clipped = read_events(dir.path() / "clipped" / "worker-000" / "metrics.jsonl", "train");
  const auto plain = read_events(dir.path() / "plain" / "worker-000" / "metrics.jsonl", "train");
  REQUIRE(clipped.size() == 2);
  REQUIRE(plain.size() == 2);
  for (const auto& e : clipped) {
    const double norm = e.at("grad_norm").get<double>();
    CHECK(std::isfinite(norm));
    CHECK(norm > 0);
  }
  for (const auto& e : plain) CHECK_FALSE(e.contains("grad_norm"));
  CHECK(clipped.back().at("loss") != plain.back().at("loss"));
  auto bad = run_command(cmd(dir, "bad", "--set optimizer.clip_grad_norm=-1"), dir);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("optimizer.clip_grad_norm"));
}
