// The CUDA embedding gather from a bf16 table (kernels/cuda/device/embedding.cuh's
// embedding_gather_kernel<std::uint16_t>: Op::embedding_bf16_table, a teacher's table with
// codistill.teacher_weights: bf16), run from its real source under the SIMT executor in
// embedding.cu's launch sequence (verdict reset, id check, gather) against the CPU backend's
// own bf16 path, bit for bit: bf16 patterns of every kind (negative, subnormal, infinite, NaN
// payloads), repeated ids, odd sizes, every schedule; a bad id writes nothing.
// The kernel has no collective, so tests/simt_mutants.cmake makes no mutant of it: its
// mutants are here, the kernel's own source with the widening edited (an element type whose
// to_f32 is the edit, found by argument-dependent lookup), and the same check must fail.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/device/embedding.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace mutant {

// A table element whose widening is an edit of bf16_widen (the kernel calls to_f32
// unqualified: this overload is the one it finds for this type).
enum class Edit { low_bits_dropped, shift_by_15, sign_lost, zero_extended };
struct Bits {
  std::uint16_t bits;
};
inline Edit g_edit = Edit::low_bits_dropped;

inline float to_f32(Bits b) {
  unsigned u = static_cast<unsigned>(b.bits) << 16;
  switch (g_edit) {
    case Edit::low_bits_dropped: u &= 0xfffe0000u; break;  // the last mantissa bit lost
    case Edit::shift_by_15: u = static_cast<unsigned>(b.bits) << 15; break;
    case Edit::sign_lost: u &= 0x7fffffffu; break;
    case Edit::zero_extended: u = b.bits; break;  // the bits as the low half
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace mutant

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
namespace k = codistill::kernels;
using kernels::EmbeddingShape;

// Random bf16 bit patterns, the edge cases first: +-0, a subnormal, +-inf, NaNs, extremes.
std::vector<std::uint16_t> bf16_patterns(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> v(n);
  for (auto& b : v) b = static_cast<std::uint16_t>(rng());
  const std::uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc1, 0xffff, 0x7f7f, 0x0080, 0x3f81};
  for (std::size_t i = 0; i < std::min(n, std::size(edges)); ++i) v[i] = edges[i];
  return v;
}

std::vector<std::int32_t> random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> d(0, vocab - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int32_t>(d(rng));
  return v;
}

// The CPU backend's bf16-table embedding (the reference the CUDA op is held to).
std::vector<float> cpu_gather(const std::vector<std::int32_t>& idv, const std::vector<std::uint16_t>& tablev,
                              const EmbeddingShape& s) {
  k::Tensor ids = k::Tensor::empty({s.rows}, k::DType::i32), table = k::Tensor::empty({s.vocab, s.dim}, k::DType::bf16);
  k::Tensor y = k::Tensor::empty({s.rows, s.dim}, k::DType::f32);
  std::memcpy(ids.raw(), idv.data(), idv.size() * sizeof(std::int32_t));
  std::memcpy(table.raw(), tablev.data(), tablev.size() * sizeof(std::uint16_t));
  k::Queue& q = k::default_cpu_queue(true);
  k::backend_for(k::DeviceKind::cpu).embedding_forward(ids, table, y, s, q);
  q.synchronize();
  return {y.data<float>(), y.data<float>() + y.numel()};
}

// embedding.cu's launch sequence for a table of element type T (std::uint16_t: the real
// kernel; mutant::Bits: the same source with the widening edited); y's bits after it, and
// the verdict.
template <class T>
std::pair<std::vector<float>, unsigned long long> gpu_gather(const std::vector<std::int32_t>& idv,
                                                             const std::vector<std::uint16_t>& tablev,
                                                             const EmbeddingShape& s, std::uint64_t seed) {
  std::vector<T> elems(tablev.size());
  std::memcpy(elems.data(), tablev.data(), tablev.size() * sizeof(std::uint16_t));
  simt::DeviceBuffer<std::int32_t> ids(idv);
  simt::DeviceBuffer<T> table(elems);
  simt::DeviceBuffer<float> y(static_cast<std::size_t>(s.rows * s.dim));  // poisoned: NaN bits 0xffffffff
  simt::DeviceBuffer<unsigned long long> verdict(std::vector<unsigned long long>{dev::kNoBadRow});
  simt::launch(dev::embedding_check_ids_kernel, config(shapes::embedding_check(s.rows), seed),
               static_cast<const std::int32_t*>(ids.data()), s.rows, s.vocab, verdict.data());
  simt::launch(dev::embedding_gather_kernel<T>, config(shapes::elementwise(s.rows * s.dim), seed),
               static_cast<const std::int32_t*>(ids.data()), static_cast<const T*>(table.data()), y.data(), s.rows,
               s.dim, static_cast<const unsigned long long*>(verdict.data()));
  return {y.download(), verdict.download()[0]};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

const std::tuple<std::int64_t, std::int64_t, std::int64_t> kShapes[] = {
    {1, 1, 1}, {7, 3, 5}, {64, 50, 33}, {300, 17, 128}, {40, 70000, 3}};

}  // namespace

TEST_CASE("SIMT: the embedding gather from a bf16 table gives the CPU's float32 rows bit for bit",
          "[simt][embedding][bf16]") {
  for (auto [rows, vocab, dim] : kShapes) {
    const EmbeddingShape s{rows, vocab, dim};
    const std::uint64_t data_seed = static_cast<std::uint64_t>(rows * 7919 + vocab * 31 + dim);
    const auto idv = random_ids(rows, vocab, data_seed);
    const auto tablev = bf16_patterns(static_cast<std::size_t>(vocab * dim), data_seed + 1);
    const auto want = cpu_gather(idv, tablev, s);
    for (const std::uint64_t seed : kSeeds) {
      INFO("rows=" << rows << " vocab=" << vocab << " dim=" << dim << " seed " << seed);
      const auto [got, verdict] = gpu_gather<std::uint16_t>(idv, tablev, s, seed);
      REQUIRE(verdict == dev::kNoBadRow);
      CHECK(same_bits(got, want));
    }
  }
}

TEST_CASE("SIMT: a bad id in a bf16-table gather writes nothing", "[simt][embedding][bf16]") {
  const EmbeddingShape s{600, 50, 7};
  auto idv = random_ids(s.rows, s.vocab, 5);
  idv[300] = -3;
  const auto tablev = bf16_patterns(static_cast<std::size_t>(s.vocab * s.dim), 6);
  for (const std::uint64_t seed : kSeeds) {
    INFO("seed " << seed);
    const auto [got, verdict] = gpu_gather<std::uint16_t>(idv, tablev, s, seed);
    CHECK(verdict == 300);
    std::size_t written = 0;
    for (float v : got) {
      std::uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      written += u != 0xffffffffu;
    }
    CHECK(written == 0);
  }
}

TEST_CASE("SIMT: the bf16-table gather's check catches mutants of the kernel's widening", "[simt][embedding][bf16]") {
  using mutant::Edit;
  for (Edit e : {Edit::low_bits_dropped, Edit::shift_by_15, Edit::sign_lost, Edit::zero_extended}) {
    mutant::g_edit = e;
    INFO("mutant " << static_cast<int>(e));
    // One small shape and one seed: the check of the first test case on them.
    const EmbeddingShape s{64, 50, 33};
    const auto idv = random_ids(s.rows, s.vocab, 11);
    const auto tablev = bf16_patterns(static_cast<std::size_t>(s.vocab * s.dim), 12);
    const auto [got, verdict] = gpu_gather<mutant::Bits>(idv, tablev, s, kSeeds[0]);
    REQUIRE(verdict == dev::kNoBadRow);
    CHECK_FALSE(same_bits(got, cpu_gather(idv, tablev, s)));
  }
}
