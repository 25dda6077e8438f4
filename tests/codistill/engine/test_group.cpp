// engine/group.hpp in one process: the config mapped onto the seam's options, and every
// exchange the identity on a group of one (a single process must train exactly as before).
#include <catch2/catch.hpp>

#include "codistill/engine/group.hpp"
#include "kernels/tensor.hpp"

using namespace codistill;

TEST_CASE("group options come from the group section", "[engine][group]") {
  GroupConfig g;
  g.kind = "mpi";
  g.timeout_s = 2.5;
  g.bucket_mb = 0.5;
  const dist::GroupOptions o = group_options(g);
  CHECK(o.kind == "mpi");
  CHECK(o.timeout.count() == 2500);
  CHECK(o.bucket_bytes == 512u * 1024u);
  CHECK_NOTHROW(dist::validate(o));
  g.bucket_mb = 1e-9;  // less than a float: one float per bucket, never zero
  CHECK(group_options(g).bucket_bytes == 4u);
}

TEST_CASE("on a group of one every exchange leaves its data as it is", "[engine][group]") {
  GroupConfig g;
  g.kind = "single";
  auto group = dist::make_process_group(group_options(g));
  REQUIRE(group->size() == 1);

  std::vector<std::int64_t> values = {7, -3};
  broadcast_values(*group, values);
  CHECK(values == std::vector<std::int64_t>{7, -3});

  const std::vector<checkpoint::TeacherStep> mine = {{1, 200}, {2, 150}};
  CHECK(share_teacher_steps(*group, mine, 2) == mine);

  // The loss terms keep their double precision (no float round trip in one process).
  const StepAgreement a = agree_after_step(*group, true, 1.0 / 3.0, 0.25, 1e-12);
  CHECK(a.stop);
  CHECK(a.loss == 1.0 / 3.0);
  CHECK(a.ce == 0.25);
  CHECK(a.distill == 1e-12);
  CHECK_FALSE(agree_after_step(*group, false, 0, 0, 0).stop);
}
