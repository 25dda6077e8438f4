// The nccl process group across real processes ([cuda]): mpirun starts nccl_ranks
// (nccl_ranks.cpp), which checks the device all-reduce and the host collectives from
// inside; here the exit codes and messages are checked. NCCL needs a GPU per rank, so the
// 2-rank cases need 2 visible GPUs and the 1-rank case one; each skips ("skipped: no CUDA
// device ...") where there are fewer, or where the build has no NCCL. Every run is under
// `timeout`, so a hang fails the test (exit 124) instead of stalling the suite.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "codistill/dist/process_group.hpp"
#include "kernels/backend.hpp"
#include "support/process.hpp"

using codistill::test::ProcessResult;
using codistill::test::TempDir;

namespace {

// Skipped (CTest), not failed, without an MPI launcher (support/process.hpp).
bool mpirun_found() {
  if (codistill::test::mpirun_found(CODISTILL_MPIEXEC)) return true;
  SUCCEED("no MPI launcher");
  return false;
}


constexpr int hang_guard_s = 180;

// Whether `ranks` ranks of an nccl group can run here; says why not (CTest: skipped).
bool can_run(int ranks) {
  const std::string why = codistill::dist::kind_unavailable_reason("nccl");
  if (!why.empty()) {
    std::cout << "skipped: no CUDA device to run NCCL on (" << why << ")" << std::endl;
    SUCCEED("no NCCL");
    return false;
  }
  if (!mpirun_found()) return false;
  const int gpus = codistill::kernels::backend_for(codistill::kernels::DeviceKind::cuda).device_count();
  if (gpus < ranks) {
    std::cout << "skipped: no CUDA device for each of " << ranks << " ranks (" << gpus
              << " visible; NCCL refuses two ranks on one GPU)" << std::endl;
    SUCCEED("too few CUDA devices");
    return false;
  }
  return true;
}

ProcessResult mpirun(int ranks, const std::string& args, const TempDir& dir) {
  std::string cmd = "timeout -k 10 " + std::to_string(hang_guard_s) + " " +
                    codistill::test::mpirun_prefix(CODISTILL_MPIEXEC, ranks) + CODISTILL_NCCL_RANKS_EXE + " " + args;
  ProcessResult r = codistill::test::run_command(cmd, dir);
  INFO("command: " << cmd << "\nexit " << r.exit_code << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code != 124);  // the hang guard fired
  REQUIRE(r.exit_code != 137);
  return r;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

namespace {

void check_collectives(int ranks) {
  TempDir dir;
  ProcessResult r = mpirun(ranks, "collectives", dir);
  INFO("ranks " << ranks << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count(r.out, "all collectives ok") == std::size_t(ranks));
  CHECK(count(r.out, "FAILED") == 0);
  for (int rank = 0; rank < ranks; ++rank)  // a GPU each: local rank k on cuda:k
    CHECK(count(r.out, "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " on cuda:" +
                           std::to_string(rank) + ":") == 1);
}

}  // namespace

// One rank: NCCL's sums are the identity, but the bootstrap, the streams and events, the
// memory checks and the host collectives all run (a machine with one GPU).
TEST_CASE("nccl group of 1 rank: the plumbing around the device all-reduce", "[cuda][dist][nccl][process]") {
  if (can_run(1)) check_collectives(1);
}

TEST_CASE("nccl group of 2 ranks: device all-reduce, host collectives and refusals", "[cuda][dist][nccl][process]") {
  if (can_run(2)) check_collectives(2);
}

TEST_CASE("nccl group: a rank that never enters the device all-reduce makes the other time out",
          "[cuda][dist][nccl][process]") {
  if (!can_run(2)) return;
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "shared");
  ProcessResult r = mpirun(2, "timeout " + dir.str("shared"), dir);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.exit_code == 3);  // rank 0's own code: mpirun ended the job on it
  CHECK(count(r.out, "FAILED") == 0);
  const std::string seen = codistill::test::read_text(dir.path() / "shared" / "rank-0.txt");
  INFO("rank 0 recorded:\n" << seen);
  CHECK(count(seen, "timed out: process group (nccl, rank 0") == 1);
  CHECK(count(seen, "did not complete within 2000 ms") == 2);  // the timeout, and quoted in the refusal
  CHECK(count(seen, "NCCL communicator was aborted") == 2);
  CHECK(count(seen, "an earlier error made unusable") == 1);
  CHECK(count(seen, "queue still usable") == 1);
}
