// The teacher gate's rule (gate_refusal) and its scoring (TeacherGate::judge): which probe
// losses are refused, and that the student is probed once per step however many teachers
// are judged at it. The gate in a real run: tests/trainer/teachers/test_codistill_process.cpp and
// test_fixed_teachers_process.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>

#include "codistill/teachers/teacher_gate.hpp"
#include "codistill/util/rng.hpp"
#include "support/training_setup.hpp"

using namespace codistill;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("the gate refuses a probe loss that is not finite or out of bounds", "[teachers]") {
  GateConfig g;  // max_ratio 2, accept_below 0.1, no absolute bound
  CHECK(gate_refusal(g, 0.5, 0.4).empty());
  CHECK(gate_refusal(g, 0.8, 0.4).empty());  // exactly 2x: still within
  CHECK_THAT(gate_refusal(g, 0.81, 0.4), Catch::Contains("max_ratio") && Catch::Contains("0.8100"));
  CHECK_THAT(gate_refusal(g, kNaN, 0.4), Catch::Contains("not finite"));
  CHECK_THAT(gate_refusal(g, kInf, 0.4), Catch::Contains("not finite"));
  SECTION("a near-perfect student does not refuse a good teacher") {
    CHECK(gate_refusal(g, 0.09, 0.01).empty());  // at or below accept_below
    CHECK(!gate_refusal(g, 0.11, 0.01).empty());
  }
  SECTION("a diverged student judges by the absolute bounds only") {
    CHECK(gate_refusal(g, 5.0, kNaN).empty());
    g.max_loss = 3;
    CHECK_THAT(gate_refusal(g, 5.0, kNaN), Catch::Contains("max_loss"));
  }
  SECTION("max_loss refuses whatever the student's loss; 0 turns a bound off") {
    g.max_loss = 1.0;
    CHECK_THAT(gate_refusal(g, 1.5, 2.3), Catch::Contains("codistill.gate.max_loss"));
    CHECK(gate_refusal(g, 0.9, 2.3).empty());
    g.max_ratio = 0;
    CHECK(gate_refusal(g, 0.9, 0.1).empty());
  }
}

TEST_CASE("the gate probes the student once per step and each teacher it judges", "[teachers]") {
  Rng rng(3);
  const ModelConfig mc = test::mlp_config({8}, {1, 2, 2}, 3, 0.0);
  Model student = build_model(mc, rng);
  Model good = build_model(mc, rng);
  Model broken = build_model(mc, rng);
  std::map<const Model*, double> loss = {{&student, 0.5}, {&good, 0.6}, {&broken, 4.0}};
  std::map<const Model*, int> calls;
  TeacherGate gate(GateConfig{}, [&](Model& m) {
    ++calls[&m];
    EvalResult r;
    r.loss = loss.at(&m);
    return r;
  }, student);

  GateVerdict a = gate.judge(good, 100);
  CHECK(a.accepted);
  CHECK(a.loss == 0.6);
  CHECK(a.own_loss == 0.5);
  CHECK(a.reason.empty());
  GateVerdict b = gate.judge(broken, 100);
  CHECK_FALSE(b.accepted);
  CHECK(b.loss == 4.0);
  CHECK_THAT(b.reason, Catch::Contains("max_ratio"));
  CHECK(calls[&student] == 1);  // one probe of the student for both teachers of step 100

  loss[&student] = 2.5;  // at a later step the student is measured again
  CHECK(gate.judge(broken, 150).accepted);
  CHECK(calls[&student] == 2);
  CHECK(calls[&broken] == 2);
}
