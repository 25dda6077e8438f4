// Byte codes (codistill/data/byte_codes.hpp): a dataset of byte values keeps its bytes beside
// the normalized floats, and the batch gathered from the bytes is the batch gathered from
// the floats, bit for bit, under every normalization; anything else keeps no codes.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

#include "codistill/data/byte_codes.hpp"
#include "codistill/data/dataset.hpp"
#include "codistill/data/sampler.hpp"
#include "codistill/util/rng.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using namespace codistill::data;
using codistill::test::fresh_seed;

namespace {

// Raw byte images [n, 1, 5, 7] (odd sizes: rows that are not a multiple of any vector width),
// every byte value present.
Dataset byte_images(std::int64_t n, std::uint64_t seed) {
  Dataset d;
  d.name = "bytes";
  d.classes = 3;
  d.images = allocate_images({n, 1, 5, 7});
  Rng rng(seed);
  float* x = d.images.data<float>();
  for (std::int64_t i = 0; i < d.images.numel(); ++i)
    x[i] = static_cast<float>(i < 256 ? i : static_cast<std::int64_t>(rng.next_u64() % 256));
  for (std::int64_t i = 0; i < n; ++i) d.labels.push_back(static_cast<std::int32_t>(i % 3));
  return d;
}

std::vector<float> gather_rows(const Dataset& d, const std::vector<std::int64_t>& idx, bool parallel) {
  kernels::Tensor out = kernels::Tensor::empty({static_cast<std::int64_t>(idx.size()), 1, 5, 7}, kernels::DType::f32);
  std::vector<std::int32_t> labels;
  gather(d, idx, out, labels, parallel);
  return std::vector<float>(out.data<float>(), out.data<float>() + out.numel());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("byte datasets gather from their codes the batch of their floats, bit for bit", "[data][codes]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  for (const char* kind : {"none", "unit", "standard"}) {
    INFO("normalize " << kind);
    Splits s{byte_images(300, seed), byte_images(40, seed + 1)};
    std::vector<std::uint8_t> train = byte_codes(s.train), test = byte_codes(s.test);
    REQUIRE(train.size() == static_cast<std::size_t>(s.train.images.numel()));
    normalize(s, kind, 255.0);
    CHECK(attach_codes(s.train, std::move(train)));
    CHECK(attach_codes(s.test, std::move(test)));
    REQUIRE(!s.train.codes.empty());
    Dataset floats = s.train;  // the same values without codes: gathered with memcpy
    floats.codes.clear();
    Rng rng(seed + 2);
    std::vector<std::int64_t> idx(97);
    for (auto& i : idx) i = static_cast<std::int64_t>(rng.next_u64() % 300);
    for (bool parallel : {false, true}) {
      INFO("parallel " << parallel);
      CHECK(same_bits(gather_rows(s.train, idx, parallel), gather_rows(floats, idx, parallel)));
    }
    {  // gather reads the codes, not the floats: a float changed behind them does not show
      Dataset probe = s.train;
      probe.images = s.train.images.clone();
      const float was = probe.images.data<float>()[5 * 35 + 3];
      probe.images.data<float>()[5 * 35 + 3] = 1e9f;
      CHECK(gather_rows(probe, {5}, false)[3] == was);
    }
    // A truncated dataset keeps the codes of its rows.
    truncate(s.train, 10);
    CHECK(s.train.codes.size() == 10u * 35u);
    CHECK(same_bits(gather_rows(s.train, {9, 0, 3}, false), [&] {
      Dataset f = s.train;
      f.codes.clear();
      return gather_rows(f, {9, 0, 3}, false);
    }()));
  }
}

TEST_CASE("values that are not bytes, or codes that do not decode to them, keep no codes", "[data][codes]") {
  Dataset d = byte_images(20, 5);
  d.images.data<float>()[33] = 2.5f;  // not an integer
  CHECK(byte_codes(d).empty());
  d.images.data<float>()[33] = 256.0f;  // past a byte
  CHECK(byte_codes(d).empty());
  d.images.data<float>()[33] = -1.0f;
  CHECK(byte_codes(d).empty());
  d.images.data<float>()[33] = 7.0f;
  std::vector<std::uint8_t> codes = byte_codes(d);
  REQUIRE(codes.size() == 20u * 35u);
  std::vector<std::uint8_t> wrong = codes;
  wrong[600] ^= 1;  // one code that does not match its value
  CHECK_FALSE(attach_codes(d, wrong));
  CHECK(d.codes.empty());
  CHECK_FALSE(attach_codes(d, std::vector<std::uint8_t>(codes.begin(), codes.end() - 1)));  // a size mismatch
  CHECK(attach_codes(d, codes));
  // normalize() changes the values: the codes it would leave stale are dropped.
  Splits s{d, byte_images(4, 6)};
  normalize(s, "unit", 255.0);
  CHECK(s.train.codes.empty());
}

TEST_CASE("Fashion-MNIST, standardized, is gathered from its byte codes", "[data][codes][fashion-mnist]") {
  DataConfig cfg;  // kind fashion-mnist, default path, normalize standard
  if (!std::filesystem::exists(std::filesystem::path(cfg.path) / "train-images-idx3-ubyte.gz")) {
    return test::skip("Fashion-MNIST not installed under " + cfg.path + " (package dataset-fashion-mnist)");
  }
  cfg.normalize = "standard";
  Splits s = load_dataset(cfg);
  CHECK(s.train.codes.size() == static_cast<std::size_t>(s.train.images.numel()));
  CHECK(s.test.codes.size() == static_cast<std::size_t>(s.test.images.numel()));
}
