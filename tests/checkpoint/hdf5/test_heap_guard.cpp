// The global heap check that keeps libhdf5 1.10 from looping forever (or reading past a
// collection) on a damaged file with variable-length strings: checkpoint/hdf5/heap_guard.hpp.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hdf5/heap_guard.hpp"
#include "checkpoint/sample_checkpoint.hpp"
#include "support/process.hpp"

using namespace codistill::checkpoint;
using codistill::test::TempDir;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(CODISTILL_SOURCE_DIR) / "tests" / "data";
// Written before checkpoints switched to fixed-length strings: one global heap collection.
const fs::path kLegacy = kData / "compat" / "pre_arena_mlp_step20.h5";

std::vector<char> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const fs::path& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}
std::size_t find(const std::vector<char>& b, const char* what, std::size_t from = 0) {
  for (std::size_t i = from; i + std::strlen(what) <= b.size(); ++i)
    if (std::memcmp(&b[i], what, std::strlen(what)) == 0) return i;
  return std::string::npos;
}
void put64(std::vector<char>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get64(const std::vector<char>& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}
// Offset of the free-space object (index 0) of the collection at `col`.
std::size_t free_space_object(const std::vector<char>& b, std::size_t col) {
  std::size_t p = col + 16;
  while (b[p] != 0 || b[p + 1] != 0) p += 16 + ((get64(b, p + 8) + 7) & ~std::uint64_t{7});
  return p;
}

}  // namespace

TEST_CASE("the fuzzer's hanging checkpoint is refused with a clear error", "[checkpoint][heap]") {
  // Found by fuzz/fuzz_checkpoint: a free-space object of size 0; libhdf5 looped forever
  // in H5HG_read when the reader asked for the string attribute `format`.
  const std::string path = std::string(CODISTILL_SOURCE_DIR) + "/tests/checkpoint/data/hang-H5HG_read.h5";
  CHECK_THROWS_WITH(check_global_heaps(path), Catch::Contains("size 0"));
  CHECK_THROWS_AS(read_meta(path), CheckpointError);
  CHECK_THROWS_WITH(read_meta(path), Catch::Contains("corrupt global heap collection at offset 2048"));
  CHECK(!verify(path).valid);
}

TEST_CASE("older checkpoints (variable-length strings) pass the check and still read", "[checkpoint][heap]") {
  CHECK(check_global_heaps(kLegacy.string()) == 1);
  CHECK(read_meta(kLegacy.string()).step == 20);
}

TEST_CASE("new checkpoints hold no global heap at all", "[checkpoint][heap]") {
  TempDir dir;
  codistill::test::SampleCheckpoint sample(3);
  write(dir.str("c.h5"), sample.view());
  CHECK(check_global_heaps(dir.str("c.h5")) == 0);
  CHECK(read_meta(dir.str("c.h5")).model == sample.view().meta.model);
}

TEST_CASE("each way a collection can be damaged is named", "[checkpoint][heap]") {
  TempDir dir;
  const auto good = slurp(kLegacy);
  const std::size_t col = find(good, "GCOL");
  REQUIRE(col != std::string::npos);
  const fs::path bad = dir.path() / "bad.h5";
  SECTION("a free-space object of size 0") {
    auto b = good;
    put64(b, free_space_object(b, col) + 8, 0);
    spit(bad, b);
    CHECK_THROWS_WITH(check_global_heaps(bad.string()), Catch::Contains("size 0"));
  }
  SECTION("an object larger than its collection") {
    auto b = good;
    put64(b, col + 16 + 8, 1u << 30);  // the first object
    spit(bad, b);
    CHECK_THROWS_WITH(check_global_heaps(bad.string()), Catch::Contains("overruns the collection"));
    CHECK_THROWS_AS(read_meta(bad.string()), CheckpointError);
  }
  SECTION("a collection running past the end of the file") {
    auto b = good;
    put64(b, col + 8, b.size());
    spit(bad, b);
    CHECK_THROWS_WITH(check_global_heaps(bad.string()), Catch::Contains("does not fit the file"));
  }
  SECTION("a signature split across the scanner's 1 MiB blocks is still found") {
    // The collection moved so that "GCOL" straddles the block boundary.
    const std::size_t size = get64(good, col + 8);
    std::vector<char> b((std::size_t{1} << 20) + size, 'x');
    std::memcpy(&b[(std::size_t{1} << 20) - 2], &good[col], size);
    put64(b, free_space_object(b, (std::size_t{1} << 20) - 2) + 8, 0);
    spit(bad, b);
    CHECK_THROWS_WITH(check_global_heaps(bad.string()), Catch::Contains("offset 1048574"));
  }
  SECTION("stray bytes GCOL that are no collection are ignored") {
    std::vector<char> b(4096, '\0');
    std::memcpy(&b[100], "GCOL", 4);  // version 0: libhdf5 refuses it itself
    spit(bad, b);
    CHECK(check_global_heaps(bad.string()) == 1);
  }
}
