// The checksums and the chunk layout of the checkpoint format, on their own.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/hash.hpp"
#include "checkpoint/layout.hpp"

using namespace codistill::checkpoint;

namespace {

std::vector<unsigned char> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(gen());
  return v;
}

// Fletcher-32 as HDF5 defines it (H5_checksum_fletcher32): big-endian 16-bit words summed
// in blocks of 360 with both sums folded after each block, a trailing odd byte as the
// high half of a word, and one more fold at the end. Plain scalar code, for comparison.
std::uint32_t fletcher32_definition(const unsigned char* p, std::size_t n) {
  std::uint32_t s1 = 0, s2 = 0;
  auto fold = [](std::uint32_t s) { return (s & 0xffff) + (s >> 16); };
  std::size_t words = n / 2;
  while (words > 0) {
    std::size_t block = std::min<std::size_t>(words, 360);
    words -= block;
    for (std::size_t i = 0; i < block; ++i, p += 2) {
      s1 += static_cast<std::uint32_t>(p[0]) << 8 | p[1];
      s2 += s1;
    }
    s1 = fold(s1);
    s2 = fold(s2);
  }
  if (n % 2) {
    s1 += static_cast<std::uint32_t>(p[0]) << 8;
    s2 += s1;
    s1 = fold(s1);
    s2 = fold(s2);
  }
  return fold(s2) << 16 | fold(s1);
}

}  // namespace

TEST_CASE("xxh64 and xxh3-64 match the reference vectors of the xxHash specification", "[checkpoint][hash]") {
  CHECK(xxh64("", 0) == 0xEF46DB3751D8E999ULL);
  CHECK(xxh64("", 0, 1) == 0xD5AFBA1336A3BE4BULL);
  CHECK(xxh64("a", 1) == 0xD24EC4F1A98C6E5BULL);
  CHECK(xxh64("abc", 3) == 0x44BC2CF5AD770999ULL);
  const char* text = "Nobody inspects the spammish repetition";  // 39 bytes: one stripe and a tail
  CHECK(xxh64(text, std::strlen(text)) == 0xFBCEA83C8A378BF1ULL);
  CHECK(xxh3_64("", 0) == 0x2D06800538D394C2ULL);
  CHECK(xxh3_64("a", 1) == 0xE6C632B61E964E1FULL);
  CHECK(xxh3_64("abc", 3) == 0x78AF5F94892F3950ULL);
  CHECK(xxh3_64(text, std::strlen(text)) == 0x6CB00603B5CC47E9ULL);
  CHECK(hex64(0xEF46DB3751D8E999ULL) == "ef46db3751d8e999");
  CHECK(hex64(0x1) == "0000000000000001");
}

TEST_CASE("the streaming content digest gives the one-shot digest for any split", "[checkpoint][hash]") {
  std::uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  // Past XXH3's 1 KiB stripes-per-block and its 240-byte short-input path.
  auto data = random_bytes(10007, seed);
  for (DigestAlgorithm alg : {DigestAlgorithm::xxh64, DigestAlgorithm::xxh3_64}) {
    INFO(digest_algorithm_name(alg));
    const auto one_shot = [&] {
      return alg == DigestAlgorithm::xxh64 ? xxh64(data.data(), data.size()) : xxh3_64(data.data(), data.size());
    };
    const std::uint64_t whole = one_shot();
    std::mt19937_64 gen(seed);
    ContentDigest h(DigestAlgorithm::xxh64 == alg ? DigestAlgorithm::xxh3_64 : DigestAlgorithm::xxh64);
    for (int trial = 0; trial < 50; ++trial) {
      h.reset(alg);  // reset switches the algorithm, too
      std::size_t at = 0;
      while (at < data.size()) {
        std::size_t n = std::min<std::size_t>(data.size() - at, gen() % 3000);
        h.update(data.data() + at, n);
        at += n;
      }
      REQUIRE(h.digest() == whole);
    }
    data[5000] ^= 1;
    CHECK(one_shot() != whole);
    data[5000] ^= 1;
  }
  CHECK(xxh3_64(data.data(), data.size()) != xxh64(data.data(), data.size()));
}

TEST_CASE("digest algorithm names", "[checkpoint][hash]") {
  CHECK(std::string(digest_algorithm_name(DigestAlgorithm::xxh3_64)) == "xxh3-64");
  CHECK(parse_digest_algorithm("xxh64") == DigestAlgorithm::xxh64);
  CHECK(parse_digest_algorithm("xxh3-64") == DigestAlgorithm::xxh3_64);
  CHECK_THROWS_WITH(parse_digest_algorithm("sha256"),
                    "unknown content digest algorithm 'sha256' (valid: xxh64, xxh3-64)");
}

TEST_CASE("fletcher32 equals HDF5's definition, including overflowing sums", "[checkpoint][hash]") {
  std::uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  for (std::size_t n : {0, 1, 2, 3, 719, 720, 721, 1440, 4096, 100001, 1 << 20}) {
    INFO("n = " << n);
    auto data = random_bytes(n, seed + n);
    CHECK(fletcher32(data.data(), n) == fletcher32_definition(data.data(), n));
    // All ones drives both sums as high as they go: the wrap-around must match too.
    std::vector<unsigned char> ones(n, 0xff);
    CHECK(fletcher32(ones.data(), n) == fletcher32_definition(ones.data(), n));
  }
}

TEST_CASE("chunk plans cover a tensor exactly once in row blocks", "[checkpoint][layout]") {
  using layout::Dims;
  struct Case {
    Dims dims;
    std::uint64_t max;
  };
  for (const auto& c : std::vector<Case>{{{10000, 10000}, 1 << 20},
                                         {{100000000}, 1 << 20},
                                         {{7}, 1 << 20},
                                         {{3, 5, 7}, 8},
                                         {{2, 3000, 3000}, 1 << 20},
                                         {{1, 1, 4097}, 1000},
                                         {{1000003}, 1000}}) {
    INFO("dims " << c.dims.size() << "-D, first " << c.dims[0] << ", max " << c.max);
    auto plan = layout::plan_chunks(c.dims, c.max);
    REQUIRE(plan);
    CHECK(plan->chunk_elements() <= std::max<std::uint64_t>(c.max, plan->inner));
    std::uint64_t numel = std::accumulate(c.dims.begin(), c.dims.end(), std::uint64_t{1}, std::multiplies<>());
    std::uint64_t next = 0;
    for (std::uint64_t k = 0; k < plan->count(); ++k) {
      auto piece = plan->piece(k, c.dims);
      REQUIRE(piece.first == next);  // contiguous, in file order
      REQUIRE(piece.elements > 0);
      REQUIRE(piece.elements <= plan->chunk_elements());
      next += piece.elements;
    }
    CHECK(next == numel);
    auto again = layout::plan_from_chunk_dims(c.dims, plan->chunk_dims);
    REQUIRE(again);
    CHECK(again->count() == plan->count());
    CHECK(again->chunk_elements() == plan->chunk_elements());
  }
  // A square matrix gets a row count that divides it: no padded last chunk.
  auto square = layout::plan_chunks({10000, 10000}, 1 << 20);
  CHECK(10000 % square->rows == 0);
  CHECK_FALSE(layout::plan_chunks({}, 1 << 20));
  CHECK_FALSE(layout::plan_chunks({4, 0}, 1 << 20));
  CHECK_FALSE(layout::plan_from_chunk_dims({8, 8}, {2, 4}));  // not whole rows
}

TEST_CASE("tensor names are checked", "[checkpoint][layout]") {
  CHECK(layout::name_problem("fc1/weight").empty());
  CHECK(layout::name_problem("rng/model_init").empty());
  CHECK_FALSE(layout::name_problem("").empty());
  CHECK_FALSE(layout::name_problem("/fc1").empty());
  CHECK_FALSE(layout::name_problem("fc1/").empty());
  CHECK_FALSE(layout::name_problem("fc1//w").empty());
  CHECK_FALSE(layout::name_problem("a/../b").empty());
}

TEST_CASE("the non-finite scan finds the first NaN or Inf", "[checkpoint][layout]") {
  std::vector<float> v(10000, 1.0f);
  CHECK(layout::first_non_finite(v.data(), v.size(), ElemType::f32) == -1);
  v[9000] = std::numeric_limits<float>::infinity();
  v[9500] = std::numeric_limits<float>::quiet_NaN();
  CHECK(layout::first_non_finite(v.data(), v.size(), ElemType::f32) == 9000);
  std::vector<double> d(10, 0.0);
  d[3] = -std::numeric_limits<double>::infinity();
  CHECK(layout::first_non_finite(d.data(), d.size(), ElemType::f64) == 3);
}
