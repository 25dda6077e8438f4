// Checkpoints written before the parameter arena and the backend interface (commit
// 4d9c34e, tests/data/compat/) still load: a worker resumes from one and ends
// bit-identical to a run of the current code from step 0, and it loads as a teacher model.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <iostream>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/persist/worker_state.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(CODISTILL_SOURCE_DIR) / "tests" / "data" / "compat";

std::string cmd(const TempDir& dir, const std::string& run) {
  return train_exe() + " --config " + (kData / "pre_arena_mlp.yaml").string() + " --run-dir " + dir.str(run) +
         " --set train.steps=40";
}

}  // namespace

// Bit-identity with a run of today's code needs today's machine to do the file writer's
// arithmetic: OpenBLAS and the project's own kernels pick their code by CPU at run time, so
// an AVX2 machine and an AVX-512 one round differently. The fresh run's own step 20 tells
// which case this is: equal to the file, the resumed run must end bit-identical; otherwise
// it must end within rounding drift (1e-5 relative) of the fresh run, which still catches a lost piece of
// state (a reset dropout generator or Adam moment moves parameters by 1e-2 and more).
TEST_CASE("a checkpoint written before the parameter arena resumes: bit-identical where this CPU rounds as the writer's did, else within 1e-5",
          "[process][compat]") {
  TempDir dir;
  auto whole = run_command(cmd(dir, "whole") + " --set checkpoint.keep=4", dir);  // step 20 kept
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);

  fs::create_directories(dir.path() / "resumed" / "worker-000");
  fs::copy_file(kData / "pre_arena_mlp_step20.h5", dir.path() / "resumed" / "worker-000" / "ckpt-000000020.h5");
  auto resumed = run_command(cmd(dir, "resumed"), dir);
  INFO(resumed.out << resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("resuming from") != std::string::npos);

  const auto fresh20 = ckpt::read(ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 20));
  const auto file20 = ckpt::read((kData / "pre_arena_mlp_step20.h5").string());
  const std::string fresh40 = ckpt::RunStore(dir.str("whole")).checkpoint_path(0, 40);
  const std::string resumed40 = ckpt::RunStore(dir.str("resumed")).checkpoint_path(0, 40);
  if (max_relative_difference(fresh20, file20) == 0.0) {
    std::cout << "compat: this CPU rounds as the writer's: checking bits" << std::endl;
    require_identical(fresh40, resumed40);
  } else {
    WARN("this CPU rounds differently from the machine that wrote the file (step 20 differs by "
         << max_relative_difference(fresh20, file20) << " relative): checking drift, not bits");
    auto a = ckpt::read(fresh40), b = ckpt::read(resumed40);
    CHECK(a.meta.step == b.meta.step);
    CHECK(a.meta.examples_seen == b.meta.examples_seen);
    CHECK(max_relative_difference(a, b) < 1e-5);  // measured 9e-8 (AVX-512 EPYC vs the writer)
  }
}

TEST_CASE("a checkpoint written before the parameter arena loads as a model", "[compat]") {
  auto data = ckpt::read((kData / "pre_arena_mlp_step20.h5").string());
  codistill::Model m = codistill::model_from_checkpoint(data);
  CHECK(m.fingerprint() == data.meta.model_fingerprint);
  auto params = m.params();
  REQUIRE(params.size() == data.params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].path);
    REQUIRE(params[i].path == data.params[i].name);
    CHECK(std::memcmp(params[i].value->raw(), data.params[i].ref().data, data.params[i].nbytes()) == 0);
  }
}
