// The CUDA backend's flash attention kernels (kernels/cuda/device/flash_attention.cuh and
// flash_attention_backward.cuh), run from their real source under the SIMT executor with the
// shapes and the order of kernels/cuda/sequence/flash_attention.cu, against the CPU twins:
// flash attention's reference (y, lse, dqkv; sums in double) and the materialized
// reference (y, dqkv). T = 1, T inside one tile, T over two and three tiles (the online
// softmax's rescaling, the loops over tiles, partial last tiles), head_dim 1, 5, 16, 40, 65
// and 128 (each column variant, padded columns), batched along heads and sequences.
// Outputs poisoned; every schedule gives the same bits (no atomics, fixed-order sums).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/sequence/attention.hpp"
#include "kernels/cpu/sequence/flash_attention.hpp"
#include "kernels/cuda/device/flash_attention.cuh"
#include "kernels/cuda/device/flash_attention_backward.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
using kernels::AttentionShape;

struct Result {
  std::vector<float> y, lse, dqkv;
};

// The tile kernels' launch as flash_attention.cu makes it (its shared memory opted in).
simt::LaunchConfig tile_config(const shapes::Launch& l, std::uint64_t seed) {
  simt::LaunchConfig c = config(l, seed);
  c.smem_opt_in = l.smem > (48u << 10);
  return c;
}

template <int kCols>
Result run_cols(const AttentionShape& s, const std::vector<float>& qkv_v, const std::vector<float>& dy_v,
                std::uint64_t seed) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads), hd = static_cast<int>(s.head_dim);
  const float scale = static_cast<float>(s.scale());
  const std::int64_t rows = s.batch * s.heads * s.seq;
  simt::DeviceBuffer<float> qkv(qkv_v), dy(dy_v), y(dy_v.size()), lse(static_cast<std::size_t>(rows)),
      rowdot(static_cast<std::size_t>(rows)), dqkv(qkv_v.size());
  const float *cqkv = qkv.data(), *cdy = dy.data();
  simt::launch(dev::flash_forward_kernel<kCols>,
               tile_config(shapes::flash_forward(s.batch, s.seq, s.heads, kCols), seed), cqkv, y.data(), lse.data(),
               T, H, hd, scale);
  const float *cy = y.data(), *clse = lse.data(), *crow = rowdot.data();
  simt::launch(dev::flash_row_dot_kernel, config(shapes::flash_row_dot(rows), seed), cdy, cy, rowdot.data(), rows, T,
               H, hd);
  simt::launch(dev::flash_backward_dkdv_kernel<kCols>,
               tile_config(shapes::flash_backward_dkdv(s.batch, s.seq, s.heads, kCols), seed), cqkv, cdy, clse, crow,
               dqkv.data(), T, H, hd, scale);
  simt::launch(dev::flash_backward_dq_kernel<kCols>,
               tile_config(shapes::flash_backward_dq(s.batch, s.seq, s.heads, kCols), seed), cqkv, cdy, clse, crow,
               dqkv.data(), T, H, hd, scale);
  return {y.download(), lse.download(), dqkv.download()};
}

Result run_simt(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<float>& dy,
                std::uint64_t seed) {
  switch (shapes::flash_cols(s.head_dim)) {
    case 2: return run_cols<2>(s, qkv, dy, seed);
    case 4: return run_cols<4>(s, qkv, dy, seed);
    default: return run_cols<8>(s, qkv, dy, seed);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// max |got - want| on the scale of 1 (lse may pass through zero).
double abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return err;
}

void check_shape(const AttentionShape& s, float range) {
  const std::int64_t D = s.d_model(), T = s.seq;
  const std::uint64_t data_seed = static_cast<std::uint64_t>(s.batch * 1009 + T * 101 + s.heads * 13 + s.head_dim);
  const auto qkv = random_floats(static_cast<std::size_t>(s.rows() * 3 * D), data_seed, -range, range);
  const auto dy = random_floats(static_cast<std::size_t>(s.rows() * D), data_seed + 1);
  const auto nL = static_cast<std::size_t>(s.batch * s.heads * T), nP = nL * static_cast<std::size_t>(T);
  using kernels::cpu::Impl;
  std::vector<float> y_ref(dy.size()), lse_ref(nL), d_ref(qkv.size());
  kernels::cpu::flash_attention_forward(qkv.data(), y_ref.data(), lse_ref.data(), s, Impl::reference);
  kernels::cpu::flash_attention_backward(qkv.data(), y_ref.data(), lse_ref.data(), dy.data(), d_ref.data(), s,
                                         Impl::reference);
  std::vector<float> y_mat(dy.size()), probs(nP), scratch(nP), d_mat(qkv.size());
  kernels::cpu::attention_forward(qkv.data(), y_mat.data(), probs.data(), s, Impl::reference);
  kernels::cpu::attention_backward(qkv.data(), probs.data(), dy.data(), d_mat.data(), scratch.data(), s,
                                   Impl::reference);
  Result first;
  for (const std::uint64_t seed : kSeeds) {
    INFO("B=" << s.batch << " T=" << T << " H=" << s.heads << " hd=" << s.head_dim << " seed " << seed);
    Result r = run_simt(s, qkv, dy, seed);
    const double terms = static_cast<double>(T * s.head_dim);
    CHECK(scaled_error(r.y, y_ref) < 1e-6 * terms);
    CHECK(abs_error(r.lse, lse_ref) < 1e-6 * terms);
    CHECK(scaled_error(r.dqkv, d_ref) < 2e-6 * terms);
    CHECK(scaled_error(r.y, y_mat) < 1e-6 * terms);
    CHECK(scaled_error(r.dqkv, d_mat) < 2e-6 * terms);
    if (first.y.empty()) first = std::move(r);
    else {
      CHECK(same_bits(r.y, first.y));
      CHECK(same_bits(r.lse, first.lse));
      CHECK(same_bits(r.dqkv, first.dqkv));
    }
  }
}

}  // namespace

TEST_CASE("SIMT: flash attention forward and backward match the CPU twins", "[simt][attention][flash]") {
  const AttentionShape shapes_[] = {{1, 1, 1, 1},   {2, 1, 2, 5},   {2, 7, 2, 5},  {1, 33, 3, 16},
                                    {1, 70, 1, 65}, {2, 70, 2, 16}, {1, 130, 1, 40}, {1, 64, 1, 128}};
  for (const AttentionShape& s : shapes_) check_shape(s, 2.0f);
}

TEST_CASE("SIMT: flash attention keeps large scores finite across tiles", "[simt][attention][flash]") {
  // Scores of a few hundred: exp overflows unless each tile's max is subtracted and the
  // running sums are rescaled when a later key tile raises a row's max.
  check_shape({1, 150, 2, 8}, 12.0f);
}

TEST_CASE("SIMT: the flash attention launches fit a Hopper SM up to head_dim 128", "[simt][attention][flash]") {
  // The largest variant (head_dim 65..128) must stay within the opt-in shared memory limit,
  // and a head_dim past 128 has no variant (the launcher refuses it).
  CHECK(shapes::flash_cols(1) == 2);
  CHECK(shapes::flash_cols(32) == 2);
  CHECK(shapes::flash_cols(33) == 4);
  CHECK(shapes::flash_cols(64) == 4);
  CHECK(shapes::flash_cols(65) == 8);
  CHECK(shapes::flash_cols(128) == 8);
  CHECK(shapes::flash_cols(129) == 0);
  for (int cols : {2, 4, 8})
    for (const shapes::Launch& l : {shapes::flash_forward(1, 4096, 1, cols),
                                    shapes::flash_backward_dkdv(1, 4096, 1, cols),
                                    shapes::flash_backward_dq(1, 4096, 1, cols)}) {
      INFO("cols " << cols << ", " << l.smem << " bytes");
      CHECK(l.smem <= simt::Limits::opt_in_smem);
      CHECK(l.grid.x == 64u);
      CHECK_NOTHROW(simt::check_launch(tile_config(l, 1)));
    }
}
