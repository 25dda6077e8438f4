// The elastic cohort (teachers/cohort.hpp) read from a run directory, and the membership
// markers it reads (persist/membership.hpp). The cohort in real runs:
// tests/trainer/teachers/test_elastic_process.cpp.
#include <catch2/catch.hpp>

#include <filesystem>

#include "codistill/persist/membership.hpp"
#include "codistill/teachers/cohort.hpp"
#include "support/process.hpp"

using namespace codistill;
using codistill::test::TempDir;
using codistill::test::write_text;
namespace fs = std::filesystem;

namespace {
std::vector<int> ids(std::initializer_list<int> v) { return v; }
std::string folder(const TempDir& dir, int w) {
  const fs::path p = dir.path() / ("worker-00" + std::to_string(w));
  fs::create_directories(p);
  return p.string();
}
}  // namespace

TEST_CASE("the cohort starts with the configured workers and takes folders that appear", "[teachers]") {
  TempDir dir;
  Cohort c(dir.str(""), /*self=*/1, /*configured=*/3, /*cap=*/0, /*retired_teach=*/true);
  CHECK(c.known() == ids({0, 2}));
  CHECK(c.live() == ids({0, 2}));
  CHECK_FALSE(c.refresh().any());  // no folder yet: the configured ones are expected all the same
  folder(dir, 1);                   // its own: never a peer
  folder(dir, 4);
  const CohortChange change = c.refresh();
  CHECK(change.joined == ids({4}));
  CHECK(change.retired.empty());
  CHECK(c.teaching() == ids({0, 2, 4}));
  CHECK_FALSE(c.refresh().any());  // reported once
  CHECK(c.joined_at(4) == -1);
  write_marker(folder(dir, 4), kJoinedMarker, 4, Membership{350, "worker-000/ckpt-000000350.h5"});
  c.refresh();
  CHECK(c.joined_at(4) == 350);
}

TEST_CASE("a retired peer stops being live, and teaches or not by codistill.retired", "[teachers]") {
  for (bool teach : {true, false}) {
    INFO("retired " << (teach ? "teach" : "drop"));
    TempDir run;
    Cohort c(run.str(""), 0, 3, /*cap=*/0, teach);
    write_marker(folder(run, 2), kRetiredMarker, 2, Membership{400, "run.retire_at"});
    const CohortChange change = c.refresh();
    CHECK(change.retired == ids({2}));
    CHECK(c.is_retired(2));
    CHECK(c.live() == ids({1}));
    CHECK(c.teaching() == (teach ? ids({1, 2}) : ids({1})));
    // A marker that vanishes (a folder read badly for a moment) does not bring it back.
    fs::remove(marker_path(folder(run, 2), kRetiredMarker));
    CHECK_FALSE(c.refresh().any());
    CHECK(c.is_retired(2));
  }
}

TEST_CASE("codistill.teachers caps the teaching peers, the lowest ids first", "[teachers]") {
  TempDir dir;
  Cohort c(dir.str(""), 0, 4, /*cap=*/2, /*retired_teach=*/false);
  CHECK(c.teaching() == ids({1, 2}));
  write_text(fs::path(folder(dir, 1)) / "retired", "");  // made by hand: empty
  c.refresh();
  CHECK(c.teaching() == ids({2, 3}));
  CHECK(c.live() == ids({2, 3}));
}

TEST_CASE("membership markers: the trainer's JSON and one made by hand", "[persist]") {
  TempDir dir;
  const std::string w = folder(dir, 3);
  CHECK_FALSE(read_marker(w, kRetiredMarker));
  write_marker(w, kRetiredMarker, 3, Membership{1200, "marker"});
  auto m = read_marker(w, kRetiredMarker);
  REQUIRE(m);
  CHECK(m->step == 1200);
  CHECK(m->reason == "marker");
  CHECK(test::read_text(marker_path(w, kRetiredMarker)).find("\"worker\":3") != std::string::npos);
  write_text(marker_path(w, kJoinedMarker), "joined by hand\n");
  m = read_marker(w, kJoinedMarker);
  REQUIRE(m);
  CHECK(m->step == -1);
  // No temp file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(w)) files += e.is_regular_file();
  CHECK(files == 2);
  CHECK_THROWS_WITH(write_marker((dir.path() / "absent" / "worker-009").string(), kRetiredMarker, 9, {}),
                    Catch::Contains("cannot write") && Catch::Contains("absent"));
}
