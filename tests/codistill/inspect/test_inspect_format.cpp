// Unit tests of the codistill-inspect output helpers: tables, units, statistics.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "codistill/inspect/format.hpp"

using namespace codistill::inspect;
using codistill::checkpoint::TensorRef;
using codistill::checkpoint::TensorValue;

TEST_CASE("tables align columns and trim trailing spaces", "[inspect]") {
  Table t({"NAME", "N", "NOTE"}, "lrl");
  t.add({"a", "1", ""});
  t.add({"longer", "12345", "x"});
  CHECK(t.render("  ") ==
        "  NAME        N  NOTE\n"
        "  a           1\n"
        "  longer  12345  x\n");
}

TEST_CASE("human units", "[inspect]") {
  CHECK(human_bytes(812) == "812 B");
  CHECK(human_bytes(1536) == "1.50 KiB");
  CHECK(human_bytes(3 * 1024 * 1024) == "3.00 MiB");
  CHECK(human_duration(42.9) == "42s");
  CHECK(human_duration(200) == "3m 20s");
  CHECK(human_duration(2 * 3600 + 5 * 60) == "2h 05m");
  CHECK(human_duration(4 * 86400 + 3 * 3600) == "4d 03h");
  CHECK(human_duration(-5) == "in the future");
  CHECK(utc_time(0) == "1970-01-01 00:00:00 UTC");
  CHECK(percent(0.873) == "87.30%");
  CHECK(num(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(json_number(std::numeric_limits<double>::infinity()).is_null());
  CHECK(json_number(0.5) == 0.5);
}

TEST_CASE("tensor statistics in double for every element type", "[inspect]") {
  std::vector<float> f{1, 2, 3, 4};
  Stats s = tensor_stats(TensorValue::copy_of(TensorRef::of("w", f)));
  CHECK(s.count == 4);
  CHECK(s.mean == 2.5);
  CHECK(s.std == Approx(std::sqrt(1.25)));
  CHECK(s.min == 1);
  CHECK(s.max == 4);
  std::vector<std::uint64_t> u{~0ULL, 0};
  Stats su = tensor_stats(TensorValue::copy_of(TensorRef::of("rng", u)));
  CHECK(su.max == Approx(1.8446744073709552e19));
  std::vector<std::int64_t> none;
  CHECK(std::isnan(tensor_stats(TensorValue::copy_of(TensorRef::of("empty", none))).mean));
}

TEST_CASE("a checkpoint name must agree with its step attribute", "[inspect]") {
  CHECK(name_step_mismatch("run/worker-000/ckpt-000000100.h5", 100).empty());
  CHECK(name_step_mismatch("run/worker-000/ckpt-000000100.h5", 99) ==
        "step attribute 99 disagrees with the file name (step 100)");
  CHECK(name_step_mismatch("elsewhere/any-name.h5", 99).empty());  // not a checkpoint name: nothing to check
}
