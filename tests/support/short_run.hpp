#pragma once
// A short real training run for the process tests that need a checkpoint to work on (export,
// inspect): 30 steps of a shipped config, one thread, no evaluation, no checkpoint but the last.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "support/process.hpp"

namespace codistill::test {

// Trains configs/<config> with the extra `--set` options `sets` into dir/<name>; returns
// its final checkpoint (step 30).
inline std::string short_training_run(const TempDir& dir, const std::string& name, const std::string& config,
                                      const std::string& sets) {
  const std::string run = dir.str(name);
  auto r = run_command(train_exe() + " --config " + std::string(CODISTILL_SOURCE_DIR) + "/configs/" + config +
                           " --run-dir " + run +
                           " --set train.steps=30 --set train.eval_every=0 --set checkpoint.every=0"
                           " --set run.threads=1 " + sets,
                       dir);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string ckpt = run + "/worker-000/ckpt-000000030.h5";
  REQUIRE(std::filesystem::exists(ckpt));
  return ckpt;
}

}  // namespace codistill::test
