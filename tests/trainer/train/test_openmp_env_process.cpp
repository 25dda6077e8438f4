// The executables choose libgomp's spin count where the environment chooses nothing
// (codistill/util/openmp_env.hpp): bounded on a shared machine, libgomp's default on a quiet
// one. libgomp's own report of its settings (OMP_DISPLAY_ENV), printed each time it is
// loaded, shows the value it runs with; CODISTILL_OPENMP_SPIN forces either branch.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "codistill/util/openmp_env.hpp"
#include "support/process.hpp"

using namespace codistill::test;

namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The last report's value of one setting, e.g. "'2000'".
std::string last_value(const std::string& err, const std::string& name) {
  const auto at = err.rfind("  " + name + " = ");
  if (at == std::string::npos) return "";
  const auto start = at + name.size() + 5;
  return err.substr(start, err.find('\n', start) - start);
}

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

}  // namespace

TEST_CASE("codistill-train and codistill-inspect bound the OpenMP spin on a shared machine unless the environment "
          "chooses",
          "[process][openmp]") {
  TempDir dir;
  const std::string clean =
      "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u CODISTILL_OPENMP_SPIN OMP_DISPLAY_ENV=verbose ";
  for (const std::string& exe : {train_exe(), inspect_exe()}) {
    INFO(exe);
    // Bounded (as on a shared machine): libgomp loaded twice, with its defaults, then in the
    // program executed again with the bound.
    ProcessResult r = run_command(clean + "CODISTILL_OPENMP_SPIN=bounded " + exe + " --help", dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(count(r.out, "--help") >= 1);  // the usage, printed by the second execution
    CHECK(count(r.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 2);
    CHECK(last_value(r.err, "GOMP_SPINCOUNT") == "'2000'");

    // libgomp's default (as on a quiet machine): not executed again.
    ProcessResult quiet = run_command(clean + "CODISTILL_OPENMP_SPIN=default " + exe + " --help", dir);
    INFO(quiet.err);
    REQUIRE(quiet.exit_code == 0);
    CHECK(count(quiet.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 1);
    CHECK(last_value(quiet.err, "GOMP_SPINCOUNT") != "'2000'");

    // Measured: either outcome, consistently (the load of this machine decides).
    ProcessResult aut = run_command(clean + exe + " --help", dir);
    INFO(aut.err);
    REQUIRE(aut.exit_code == 0);
    const std::size_t loads = count(aut.err, "OPENMP DISPLAY ENVIRONMENT BEGIN");
    CHECK((loads == 1 || loads == 2));
    CHECK((last_value(aut.err, "GOMP_SPINCOUNT") == "'2000'") == (loads == 2));

    // Ranks of a parallel launch start together: bounded without measuring.
    ProcessResult rank = run_command(clean + "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 " + exe + " --help", dir);
    INFO(rank.err);
    REQUIRE(rank.exit_code == 0);
    CHECK(count(rank.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 2);
    CHECK(last_value(rank.err, "GOMP_SPINCOUNT") == "'2000'");

    // An unknown mode is refused, also where GOMP_SPINCOUNT would have made it moot.
    const std::string program = exe.substr(exe.rfind('/') + 1);
    for (const std::string& env : {clean, std::string("env GOMP_SPINCOUNT=777 ")}) {
      ProcessResult bad = run_command(env + "CODISTILL_OPENMP_SPIN=sometimes " + exe + " --help", dir);
      INFO(bad.err);
      CHECK(bad.exit_code == 2);
      CHECK(bad.err.find(program + ": CODISTILL_OPENMP_SPIN='sometimes' is not one of auto, bounded, default") !=
            std::string::npos);
    }

    ProcessResult mine = run_command("env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=777 OMP_DISPLAY_ENV=verbose " + exe +
                                         " --help", dir);
    INFO(mine.err);
    REQUIRE(mine.exit_code == 0);
    CHECK(count(mine.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 1);  // not executed again
    CHECK(last_value(mine.err, "GOMP_SPINCOUNT") == "'777'");

    ProcessResult passive = run_command(
        "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive OMP_DISPLAY_ENV=verbose " + exe + " --help", dir);
    INFO(passive.err);
    REQUIRE(passive.exit_code == 0);
    CHECK(count(passive.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 1);
    CHECK(last_value(passive.err, "OMP_WAIT_POLICY") == "'PASSIVE'");
    CHECK(last_value(passive.err, "GOMP_SPINCOUNT") != "'2000'");
  }
}

TEST_CASE("the OpenMP spin is bounded from half a busy CPU of other work, and where the load is unknown",
          "[openmp]") {
  using codistill::CpuLoad;
  CHECK_FALSE(codistill::bound_openmp_spin(CpuLoad{0.0, 2}));
  CHECK_FALSE(codistill::bound_openmp_spin(CpuLoad{0.49, 2}));
  CHECK(codistill::bound_openmp_spin(CpuLoad{0.5, 2}));
  CHECK(codistill::bound_openmp_spin(CpuLoad{1.7, 2}));
  CHECK(codistill::bound_openmp_spin(std::nullopt));
  // The run log's line names a choice only where this process made it: a note another
  // process left in the environment (another pid) is not taken for this one's.
  ::setenv("CODISTILL_OPENMP_SPIN_CHOICE", "1:bounded (2000): stale", 1);
  CHECK(codistill::openmp_spin_summary().find("from the environment") != std::string::npos);
  ::setenv("CODISTILL_OPENMP_SPIN_CHOICE", (std::to_string(::getpid()) + ":libgomp's default: quiet").c_str(), 1);
  CHECK(codistill::openmp_spin_summary().find("chosen here: libgomp's default: quiet") != std::string::npos);
  ::unsetenv("CODISTILL_OPENMP_SPIN_CHOICE");
  // This machine's load, read from /proc/stat: a share of the CPUs this process may use.
  const auto load = codistill::sample_cpu_load(50);
  REQUIRE(load.has_value());
  CHECK(load->cpus >= 1);
  CHECK(load->busy >= 0.0);
  CHECK(load->busy <= load->cpus + 1e-9);
}
