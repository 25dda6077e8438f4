// `codistill-inspect eval --predictions`: one CSV row per example with its label, the
// predicted class and every class's probability; for several checkpoints, their ensemble's
// mean. A C++ process test of its own (not beside the exporter's, which run Python and stay
// out of the sanitized suite): two short real fmnist_mlp runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.hpp"
#include "support/short_run.hpp"

using namespace codistill::test;

namespace {

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

}  // namespace

TEST_CASE("inspect eval --predictions of an ensemble: the mean of its members' probabilities", "[process][inspect]") {
  TempDir dir;
  const std::string small = "--set model.hidden=[16] --set data.test_limit=50";
  const std::string a = short_training_run(dir, "a", "fmnist_mlp.yaml", small);
  const std::string b = short_training_run(dir, "b", "fmnist_mlp.yaml", small + " --set run.seed=2");
  auto rows = [&](const std::string& args, const std::string& file) {
    REQUIRE(run_command(inspect_exe() + " eval " + args + " --predictions " + dir.str(file), dir).exit_code == 0);
    std::vector<std::vector<double>> out;
    std::istringstream in(read_text(dir.str(file)));
    std::string line;
    std::getline(in, line);
    CHECK(line == "index,label,predicted,p0,p1,p2,p3,p4,p5,p6,p7,p8,p9");
    while (std::getline(in, line)) {
      std::vector<double> row;
      std::istringstream fields(line);
      for (std::string v; std::getline(fields, v, ',');) row.push_back(std::stod(v));
      out.push_back(row);
    }
    return out;
  };
  const auto pa = rows(a, "a.csv"), pb = rows(b, "b.csv"), pe = rows(a + " " + b, "ab.csv");
  REQUIRE(pa.size() == 50);
  REQUIRE(pe.size() == 50);
  for (std::size_t i = 0; i < pa.size(); ++i) {
    double sum = 0;
    for (std::size_t c = 3; c < pa[i].size(); ++c) {
      sum += pa[i][c];
      CHECK(pe[i][c] == (pa[i][c] + pb[i][c]) / 2);  // the values read back exactly
    }
    CHECK(pe[i][2] == static_cast<double>(std::max_element(pe[i].begin() + 3, pe[i].end()) - (pe[i].begin() + 3)));
    CHECK(sum == Approx(1.0).epsilon(1e-12));
    CHECK(pe[i][1] == pa[i][1]);  // label
  }
  auto bad = run_command(inspect_exe() + " eval " + a + " --predictions " + dir.str("no-such-folder/p.csv"), dir);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("--predictions") && Catch::Contains("cannot write"));
}
