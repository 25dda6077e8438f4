// codistill/util/memory_info.hpp: sizes parsed and printed, the process's resident set.
#include <catch2/catch.hpp>

#include <vector>

#include "codistill/util/memory_info.hpp"

using namespace codistill::memory;

TEST_CASE("memory sizes: units parse, anything else is refused", "[memory]") {
  CHECK(parse_bytes("4096") == 4096);
  CHECK(parse_bytes("12GiB") == 12LL << 30);
  CHECK(parse_bytes("1.5K") == 1536);
  CHECK(parse_bytes("800MB") == 800000000);
  CHECK(parse_bytes("2TB") == 2000000000000LL);
  CHECK_FALSE(parse_bytes("12 GiB").has_value());
  CHECK_FALSE(parse_bytes("GiB").has_value());
  CHECK_FALSE(parse_bytes("-1").has_value());
  CHECK_FALSE(parse_bytes("1e30").has_value());
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(300LL << 20) == "300 MiB");
}

TEST_CASE("memory info: the resident peak grows with memory touched", "[memory]") {
  const auto before = resident_peak_bytes();
  REQUIRE(before.has_value());
  std::vector<char> block(static_cast<std::size_t>(*before) + (64 << 20), 1);  // touched: resident
  const auto after = resident_peak_bytes();
  REQUIRE(after.has_value());
  CHECK(*after >= *before + static_cast<std::int64_t>(block.size()) - *before);
  CHECK(*after > *before);
  CHECK(block[block.size() / 2] == 1);
  CHECK(resident_bytes().value_or(0) > 0);
  const auto avail = host_available();
  REQUIRE(avail.has_value());
  CHECK(avail->bytes > 0);
}
