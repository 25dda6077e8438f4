// The door of the mpi and nccl groups (codistill/dist/call_guard.hpp): a broken group and
// overlapping calls are refused with the messages the groups have always given, and a refused
// call leaves the gate as it found it.
#include <catch2/catch.hpp>

#include <string>

#include "codistill/dist/call_guard.hpp"
#include "codistill/dist/process_group.hpp"

using namespace codistill::dist;

namespace {

std::string refusal(CallGate& gate, const char* what) {
  try {
    CallGuard call(gate, what);
  } catch (const CollectiveTimeout&) {
    return "unexpected CollectiveTimeout";
  } catch (const ProcessGroupError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("call guard: calls one after the other pass, and who() is asked only for a refusal", "[dist]") {
  int asked = 0;
  CallGate gate(
      [&] {
        ++asked;
        return std::string("process group (mpi, rank 1 of 3)");
      },
      "the rule");
  CHECK(gate.usable());
  CHECK(refusal(gate, "poll").empty());
  CHECK(refusal(gate, "wait_all").empty());  // the first guard's scope ended: the gate is clear again
  CHECK(asked == 0);
}

TEST_CASE("call guard: a second call while one is inside is refused naming the rule, and the first stays inside",
          "[dist]") {
  CallGate gate([] { return std::string("process group (nccl, rank 0 of 2)"); },
                "calls into one group must not overlap");
  {
    CallGuard inside(gate, "wait_all");
    CHECK(refusal(gate, "broadcast") ==
          "process group (nccl, rank 0 of 2): broadcast while another thread is inside the group: calls into one "
          "group must not overlap");
    // The refused call did not clear the flag of the one inside.
    CHECK(refusal(gate, "barrier").find("barrier while another thread is inside the group") != std::string::npos);
  }
  CHECK(refusal(gate, "barrier").empty());
}

TEST_CASE("call guard: after mark_broken every call is refused with the reason, and the gate stays clear", "[dist]") {
  CallGate gate([] { return std::string("process group (mpi, rank 1 of 3)"); },
                "MPI runs at MPI_THREAD_SERIALIZED, so calls into one group must not overlap");
  gate.mark_broken("process group (mpi, rank 1 of 3): barrier did not complete within 50 ms");
  CHECK_FALSE(gate.usable());
  const std::string expected =
      "process group (mpi, rank 1 of 3): poll on a group that an earlier error made unusable (process group (mpi, "
      "rank 1 of 3): barrier did not complete within 50 ms); the process must exit";
  CHECK(refusal(gate, "poll") == expected);
  CHECK(refusal(gate, "poll") == expected);  // not "another thread is inside": the refusal entered nothing
}
