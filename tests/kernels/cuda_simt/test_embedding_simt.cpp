// The CUDA backend's embedding kernels (kernels/cuda/device/embedding.cuh), run from their
// real source under the SIMT executor in the launch sequence of
// kernels/cuda/sequence/embedding.cu (verdict reset, id check, gather or scatter) with the
// shapes of embedding.cuh, against the CPU twin (kernels/cpu/sequence/embedding): the gather
// bit for bit, and the scatter bit for bit too (every element of dtable adds its rows in the
// order of n, as the CPU does), under every schedule; repeated ids, odd sizes, a vocabulary
// larger than the scatter's bands. A bad id: the verdict names the first bad row and neither
// kernel writes anything.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/sequence/embedding.hpp"
#include "kernels/cuda/device/embedding.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
using kernels::EmbeddingShape;

std::vector<std::int32_t> random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int32_t>(d(rng));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// embedding.cu's launch sequence: the verdict set to kNoBadRow, the check, then the kernel.
void check_ids(simt::DeviceBuffer<std::int32_t>& ids, simt::DeviceBuffer<unsigned long long>& verdict,
               const EmbeddingShape& s, std::uint64_t seed) {
  verdict.upload({dev::kNoBadRow});
  simt::launch(dev::embedding_check_ids_kernel, config(shapes::embedding_check(s.rows), seed),
               static_cast<const std::int32_t*>(ids.data()), s.rows, s.vocab, verdict.data());
}

void gather(simt::DeviceBuffer<std::int32_t>& ids, simt::DeviceBuffer<float>& table, simt::DeviceBuffer<float>& y,
            simt::DeviceBuffer<unsigned long long>& verdict, const EmbeddingShape& s, std::uint64_t seed) {
  simt::launch(dev::embedding_gather_kernel<float>, config(shapes::elementwise(s.rows * s.dim), seed),
               static_cast<const std::int32_t*>(ids.data()), static_cast<const float*>(table.data()), y.data(), s.rows,
               s.dim, static_cast<const unsigned long long*>(verdict.data()));
}

void scatter(simt::DeviceBuffer<std::int32_t>& ids, simt::DeviceBuffer<float>& dy, simt::DeviceBuffer<float>& dtable,
             simt::DeviceBuffer<unsigned long long>& verdict, const EmbeddingShape& s, std::uint64_t seed) {
  const auto e = shapes::embedding_scatter(s.vocab, s.dim);
  simt::launch(dev::embedding_scatter_kernel, config(e.pass, seed), static_cast<const std::int32_t*>(ids.data()),
               static_cast<const float*>(dy.data()), dtable.data(), s.rows, s.vocab, s.dim, e.band_width,
               static_cast<const unsigned long long*>(verdict.data()));
}

}  // namespace

TEST_CASE("SIMT: embedding gather and scatter match the CPU twin bit for bit", "[simt][embedding]") {
  for (auto [rows, vocab, dim] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {7, 3, 5},
                                  {64, 50, 33}, {300, 17, 128}, {2048, 1000, 16}, {40, 70000, 3}}) {
    const EmbeddingShape s{rows, vocab, dim};
    const std::uint64_t data_seed = static_cast<std::uint64_t>(rows * 7919 + vocab * 31 + dim);
    const auto idv = random_ids(rows, vocab, data_seed);
    const auto tablev = random_floats(static_cast<std::size_t>(vocab * dim), data_seed + 1);
    const auto dyv = random_floats(static_cast<std::size_t>(rows * dim), data_seed + 2);
    const auto dtable0 = random_floats(tablev.size(), data_seed + 3);
    std::vector<float> y_want(dyv.size()), dtable_want = dtable0, dtable_fast = dtable0;
    kernels::cpu::embedding_forward(idv.data(), tablev.data(), y_want.data(), s, kernels::cpu::Impl::reference);
    kernels::cpu::embedding_backward(idv.data(), dyv.data(), dtable_want.data(), s, kernels::cpu::Impl::reference);
    kernels::cpu::embedding_backward(idv.data(), dyv.data(), dtable_fast.data(), s, kernels::cpu::Impl::fast);
    REQUIRE(same_bits(dtable_fast, dtable_want));
    for (const std::uint64_t seed : kSeeds) {
      INFO("rows=" << rows << " vocab=" << vocab << " dim=" << dim << " seed " << seed);
      simt::DeviceBuffer<std::int32_t> ids(idv);
      simt::DeviceBuffer<float> table(tablev), y(dyv.size()), dy(dyv), dtable(dtable0);  // y poisoned (NaN)
      simt::DeviceBuffer<unsigned long long> verdict(1);
      check_ids(ids, verdict, s, seed);
      REQUIRE(verdict.download()[0] == dev::kNoBadRow);
      gather(ids, table, y, verdict, s, seed);
      CHECK(same_bits(y.download(), y_want));
      scatter(ids, dy, dtable, verdict, s, seed);
      CHECK(same_bits(dtable.download(), dtable_want));
    }
  }
}

TEST_CASE("SIMT: a bad embedding id is found (first bad row) and nothing is written", "[simt][embedding]") {
  const EmbeddingShape s{600, 50, 7};
  auto idv = random_ids(s.rows, s.vocab, 5);
  idv[517] = -1;
  idv[300] = 50;  // the first bad row
  idv[599] = 1 << 30;
  const auto tablev = random_floats(static_cast<std::size_t>(s.vocab * s.dim), 6);
  const auto dyv = random_floats(static_cast<std::size_t>(s.rows * s.dim), 7);
  const auto dtable0 = random_floats(tablev.size(), 8);
  for (const std::uint64_t seed : kSeeds) {
    INFO("seed " << seed);
    simt::DeviceBuffer<std::int32_t> ids(idv);
    simt::DeviceBuffer<float> table(tablev), y(dyv.size()), dy(dyv), dtable(dtable0);
    const auto y_before = y.download();
    simt::DeviceBuffer<unsigned long long> verdict(1);
    check_ids(ids, verdict, s, seed);
    CHECK(verdict.download()[0] == 300);
    gather(ids, table, y, verdict, s, seed);
    scatter(ids, dy, dtable, verdict, s, seed);
    CHECK(same_bits(y.download(), y_before));
    CHECK(same_bits(dtable.download(), dtable0));
  }
}

TEST_CASE("SIMT: the embedding scatter's launch shape covers every column and vocabulary row", "[simt][embedding]") {
  for (auto [vocab, dim] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 5}, {70000, 3}, {50257, 768}, {1024, 768}}) {
    INFO("vocab=" << vocab << " dim=" << dim);
    const auto e = shapes::embedding_scatter(vocab, dim);
    CHECK(e.pass.block.x * e.pass.block.y <= 1024);
    CHECK(std::int64_t{e.pass.grid.x} * e.pass.block.x >= dim);
    CHECK(std::int64_t{e.pass.grid.y} * e.pass.block.y * e.band_width >= vocab);
    CHECK(e.pass.grid.y <= 65535);
  }
}
