// The mpi process group across real processes: mpirun starts process_group_ranks
// (mpi_ranks.cpp), which checks the collectives from inside; here the exit codes and the
// messages are checked. Every run is under `timeout`, so a hang fails the test (exit 124)
// instead of stalling the suite; CTest's TIMEOUT for this file is the outer guard.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "codistill/dist/process_group.hpp"
#include "support/process.hpp"

using codistill::test::ProcessResult;
using codistill::test::TempDir;

namespace {

// The hang guard of one mpirun, in seconds: far beyond what a run takes (a few seconds),
// well within CTest's timeout.
constexpr int hang_guard_s = 120;

bool mpi_built() {
  std::string why = codistill::dist::kind_unavailable_reason("mpi");
  if (!why.empty()) std::cout << "skipped: no MPI (" << why << ")" << std::endl;  // CTest: skipped
  return why.empty();
}

ProcessResult mpirun(int ranks, const std::string& args, const TempDir& dir) {
  // Under the sanitized suite (ASAN_OPTIONS set) the ranks run sanitized, but without
  // LeakSanitizer: OpenMPI 4.1 does not free what MPI_Init allocated (thousands of blocks,
  // most from MCA components already unloaded, so no suppression can name them), and a
  // rank that exits without MPI_Finalize on purpose would have its exit code replaced by
  // LSan's. Our own code's leaks are still checked by the single-group tests.
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::string cmd = "ASAN_OPTIONS='" + std::string(asan ? asan : "") + (asan && *asan ? ":" : "") +
                    "detect_leaks=0' timeout -k 10 " + std::to_string(hang_guard_s) + " " +
                    codistill::test::mpiexec_path(CODISTILL_MPIEXEC);
  // OpenMPI refuses to run as root unless told to; CI runs as root.
  if (::geteuid() == 0) cmd += " --allow-run-as-root";
  // More ranks than cores on a 2-core machine.
  cmd += " --oversubscribe -np " + std::to_string(ranks) + " " + CODISTILL_MPI_RANKS_EXE + " " + args;
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

TEST_CASE("mpi group: every collective on 2 and 3 ranks", "[dist][mpi][process]") {
  if (!mpi_built()) return;
  for (int ranks : {2, 3}) {
    TempDir dir;
    std::filesystem::create_directories(dir.path() / "shared");
    ProcessResult r = mpirun(ranks, "collectives " + dir.str("shared"), dir);
    INFO("ranks " << ranks << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    CHECK(r.exit_code == 0);
    CHECK(count(r.out, "all collectives ok") == std::size_t(ranks));
    CHECK(count(r.out, "FAILED") == 0);
  }
}

TEST_CASE("mpi group: a rank that never enters a collective makes the others time out", "[dist][mpi][process]") {
  if (!mpi_built()) return;
  for (std::string op : {"all_reduce", "broadcast", "barrier"}) {
    int ranks = op == "all_reduce" ? 3 : 2;
    TempDir dir;
    std::filesystem::create_directories(dir.path() / "shared");
    ProcessResult r = mpirun(ranks, "timeout " + op + " " + dir.str("shared"), dir);
    INFO(op << " on " << ranks << " ranks\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    CHECK(r.exit_code == 3);  // the first waiting rank's own code: mpirun ended the job on it
    CHECK(count(r.out, "FAILED") == 0);
    // Every rank but the absent one timed out with the group's message, then was refused.
    for (int rank = 0; rank < ranks - 1; ++rank) {
      std::string seen = codistill::test::read_text(dir.path() / "shared" / ("rank-" + std::to_string(rank) + ".txt"));
      INFO("rank " << rank << " recorded:\n" << seen);
      CHECK(count(seen, "timed out: process group (mpi, rank " + std::to_string(rank)) == 1);
      CHECK(count(seen, "did not complete within 2000 ms") == 2);  // the timeout, and quoted in the refusal
      CHECK(count(seen, "a peer rank is dead, hung or in a different collective") == 2);
      CHECK(count(seen, "refused after the timeout") == 1);
      CHECK(count(seen, "an earlier error made unusable") == 1);
    }
    CHECK_FALSE(std::filesystem::exists(dir.path() / "shared" / ("rank-" + std::to_string(ranks - 1) + ".txt")));
  }
}

TEST_CASE("mpi group: a rank that exits ends the job instead of hanging it", "[dist][mpi][process]") {
  if (!mpi_built()) return;
  TempDir dir;
  ProcessResult r = mpirun(3, "dies", dir);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.exit_code == 7);  // mpirun reports the dead rank's code
  CHECK(count(r.out, "exiting with 7") == 1);
  CHECK(count(r.out, "FAILED") == 0);
}
