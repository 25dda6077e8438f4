// The executables choose libgomp's spin count where the environment chooses nothing
// (codistill/util/openmp_env.hpp): libgomp's own report of its settings (OMP_DISPLAY_ENV),
// printed each time it is loaded, shows the value it runs with.
#include <catch2/catch.hpp>

#include <string>

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

TEST_CASE("codistill-train and codistill-inspect run with a bounded OpenMP spin unless the environment chooses",
          "[process][openmp]") {
  TempDir dir;
  const std::string clean = "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose ";
  for (const std::string& exe : {train_exe(), inspect_exe()}) {
    INFO(exe);
    ProcessResult r = run_command(clean + exe + " --help", dir);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out.find("--help") != std::string::npos);  // the usage, printed once, by the second execution
    // libgomp was loaded twice: with its defaults, then in the program executed again.
    CHECK(count(r.err, "OPENMP DISPLAY ENVIRONMENT BEGIN") == 2);
    CHECK(last_value(r.err, "GOMP_SPINCOUNT") == "'2000'");

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
