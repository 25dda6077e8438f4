// Worker groups of kind nccl as real processes: a CPU config naming nccl is refused (runs
// everywhere), and where 2 GPUs and NCCL are present ([cuda]) a group of 2 ranks training on
// them through NCCL ends where the same group through the mpi kind (host staging) does.
#include <catch2/catch.hpp>

#include <filesystem>
#include <cstdlib>
#include <iostream>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/dist/process_group.hpp"
#include "kernels/backend.hpp"
#include "support/checkpoint_compare.hpp"
#include "support/process.hpp"

using namespace codistill::test;
namespace ckpt = codistill::checkpoint;
namespace fs = std::filesystem;

namespace {

// Skipped (CTest), not failed, without an MPI launcher (support/process.hpp).
bool mpirun_found() {
  if (codistill::test::mpirun_found(CODISTILL_MPIEXEC)) return true;
  SUCCEED("no MPI launcher");
  return false;
}


constexpr double kGuardS = 300;

const char* kConfig = R"(run:
  seed: 3
  threads: 1
group:
  timeout_s: 60
data:
  kind: synthetic
  batch_size: 16
  synthetic_train: 2048
  synthetic_test: 256
  synthetic_shape: [1, 8, 8]
model:
  kind: mlp
  hidden: [48, 32]
optimizer:
  kind: sgd
  lr: 0.05
  momentum: 0.9
train:
  steps: 40
  eval_every: 0
  log_every: 10
checkpoint:
  every: 10
  keep: 10
)";

std::string train(const TempDir& dir, const std::string& run, const std::string& extra) {
  return train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " + dir.str(run) + " " + extra;
}

ProcessResult run_guarded(const std::string& cmd, const TempDir& dir, const std::string& tag) {
  ProcessResult r;
  {
    Child child(cmd, dir, tag);
    const bool ended = wait_until([&] { return !child.running(); }, kGuardS);
    r.out = read_text(dir.path() / (tag + ".out"));
    r.err = read_text(dir.path() / (tag + ".err"));
    INFO("command: " << cmd << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(ended);  // else the hang guard: Child's destructor kills it
    r.exit_code = child.wait();
  }
  return r;
}

}  // namespace

TEST_CASE("group.kind nccl with the model on the CPU is a configuration error (exit 2)", "[process][group][nccl]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  ProcessResult r = run_command(train(dir, "run", "--set group.kind=nccl --device cpu"), dir);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("group.kind") != std::string::npos);
  CHECK(r.err.find("expected device cuda or cuda:K with group.kind nccl") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.path() / "run" / "worker-000"));  // refused before anything is written
}

TEST_CASE("a CUDA group of 2 ranks through NCCL ends where the same group through MPI does",
          "[cuda][process][group][nccl]") {
  const std::string why = codistill::dist::kind_unavailable_reason("nccl");
  const int gpus = codistill::kernels::backend_for(codistill::kernels::DeviceKind::cuda).device_count();
  if (!why.empty() || gpus < 2) {
    std::cout << "skipped: no CUDA device for each of 2 NCCL ranks (" << gpus << " visible"
              << (why.empty() ? "" : "; " + why) << ")" << std::endl;
    SUCCEED("skipped");
    return;
  }
  if (!mpirun_found()) return;
  TempDir dir;
  write_text(dir.path() / "c.yaml", kConfig);
  // Buckets of 256 floats, so that some start while backward still runs (on the group's
  // stream, overlapping the compute stream's remaining backward).
  const std::string common = "--worker 0 --device cuda --set group.bucket_mb=0.0009765625";
  auto mpi = run_guarded(mpirun_prefix(CODISTILL_MPIEXEC, 2) + train(dir, "mpi", common + " --set group.kind=mpi"),
                         dir, "mpi");
  REQUIRE(mpi.exit_code == 0);
  auto nccl = run_guarded(
      mpirun_prefix(CODISTILL_MPIEXEC, 2) + train(dir, "nccl", common + " --set group.kind=nccl"), dir, "nccl");
  INFO(nccl.out << nccl.err);
  REQUIRE(nccl.exit_code == 0);
  CHECK(nccl.out.find("worker group: 2 ranks") != std::string::npos);
  CHECK(nccl.out.find("floats, 0 started while backward") == std::string::npos);
  const auto a = ckpt::read(ckpt::RunStore(dir.str("mpi")).checkpoint_path(0, 40));
  const auto b = ckpt::read(ckpt::RunStore(dir.str("nccl")).checkpoint_path(0, 40));
  CHECK(a.meta.examples_seen == b.meta.examples_seen);
  // Two ranks: each element's sum is a + b in both, so any difference is the order of the
  // host-staged and device paths' other work; float32 rounding at most.
  const double diff = max_relative_difference(a, b);
  std::cout << "nccl vs mpi group, 40 steps: max relative parameter difference " << diff << std::endl;
  CHECK(diff <= 1e-5);
  const auto early = ckpt::read(ckpt::RunStore(dir.str("nccl")).checkpoint_path(0, 10));
  CHECK(max_relative_difference(early, b) > 1e-3);  // not vacuous: the parameters moved
}
