// The CUDA backend's batch normalization and global average pooling kernels
// (kernels/cuda/device/batchnorm.cuh, avgpool.cuh), run from their real source under the
// SIMT executor with the launchers' shapes (batchnorm.cuh, launch_shapes.hpp), against the
// CPU twins (kernels/cpu/image/batchnorm, avgpool): 1d and 2d sizes, odd ones, a channel of fewer
// values than a warp and of many more than a block, train and eval, dx or not, with and
// without the fused relu (Op::batchnorm_activation: the CPU twin's act = relu / relu_y).
// Outputs are poisoned first; a run under another schedule must give the same bits (the
// block sums have a fixed order); pooling matches the CPU bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/image/avgpool.hpp"
#include "kernels/cpu/image/batchnorm.hpp"
#include "kernels/cpu/sequence/layernorm.hpp"
#include "kernels/cuda/device/avgpool.cuh"
#include "kernels/cuda/device/batchnorm.cuh"
#include "kernels/cuda/device/layernorm.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
using Ref = kernels::cpu::Impl;

struct Result {
  std::vector<float> y, rm, rv, sm, si, dx, dg, db;
};

// relu_y: null for plain batch norm; with the fused relu, the y the backward masks dy with
// (the forward then writes relu(bn(x))).
Result run_simt(const kernels::BatchNormShape& s, bool training, bool need_dx, const std::vector<float>& x,
                const std::vector<float>& gamma, const std::vector<float>& beta, std::vector<float> rm,
                std::vector<float> rv, const std::vector<float>& dy, std::vector<float> dg, std::vector<float> db,
                const std::vector<float>* relu_y, std::uint64_t seed) {
  const auto n = x.size(), C = gamma.size();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  simt::DeviceBuffer<float> dx_in(x), dgamma(gamma), dbeta(beta), drm(rm), drv(rv), y(std::vector<float>(n, nan)),
      sm(std::vector<float>(C, nan)), si(std::vector<float>(C, nan)), ddy(dy), dx(std::vector<float>(n, nan)),
      ddg(dg), ddb(db), dmask(relu_y ? *relu_y : std::vector<float>{});
  const auto b = shapes::batchnorm(s.channels, s.per_channel());
  const dev::BatchNormDims d{s.batch,  s.channels, s.spatial,
                             static_cast<float>(s.eps), static_cast<float>(s.momentum),
                             training, b.chunks,   b.per_chunk, relu_y != nullptr};
  const float* mask = relu_y ? dmask.data() : nullptr;
  const auto shape = config(b.pass, seed);
  // Poisoned partials: a pass that read a partial no earlier pass wrote shows as NaN.
  simt::DeviceBuffer<double> partial(std::vector<double>(b.partial_bytes / sizeof(double),
                                                         std::numeric_limits<double>::quiet_NaN()));
  double* sums = partial.data();
  double* second = partial.data() + s.channels * b.chunks;
  // The launch sequence of kernels/cuda/image/batchnorm.cu.
  if (training) {
    simt::launch(dev::batchnorm_sum_kernel, shape, dx_in.data(), sums, d);
    simt::launch(dev::batchnorm_sqdev_kernel, shape, dx_in.data(), static_cast<const double*>(sums), second, d);
  }
  simt::launch(dev::batchnorm_normalize_kernel, shape, dx_in.data(), dgamma.data(), dbeta.data(), drm.data(),
               drv.data(), y.data(), sm.data(), si.data(), static_cast<const double*>(training ? sums : nullptr),
               static_cast<const double*>(training ? second : nullptr), d);
  simt::launch(dev::batchnorm_backward_sums_kernel, shape, dx_in.data(), sm.data(), si.data(), ddy.data(), mask,
               sums, d);
  simt::launch(dev::batchnorm_backward_dx_kernel, shape, dx_in.data(), dgamma.data(), sm.data(), si.data(),
               ddy.data(), mask, need_dx ? dx.data() : nullptr, ddg.data(), ddb.data(),
               static_cast<const double*>(sums), d);
  return {y.download(), drm.download(), drv.download(), sm.download(), si.download(), dx.download(),
          ddg.download(), ddb.download()};
}

// The fused relu's boundary, written into the inputs: channel 0 constant 0.5 with beta 0 (and,
// for eval, running mean 0.5), so its every pre-activation is exactly 0 (x - mean = 0; 0.5 *
// scale is exact, so also with a contracted multiply-add) and relu's `v > 0` decides; where
// there is a second channel, one NaN in it (relu gives 0; in training the whole channel's
// statistics are NaN and its y all 0).
void relu_boundary(const kernels::BatchNormShape& s, std::vector<float>& x, std::vector<float>& beta,
                   std::vector<float>& rm) {
  for (std::int64_t k = 0; k < s.batch; ++k)
    for (std::int64_t i = 0; i < s.spatial; ++i) x[static_cast<std::size_t>(k * s.channels * s.spatial + i)] = 0.5f;
  beta[0] = 0.0f;
  rm[0] = 0.5f;
  if (s.channels > 1)
    x[static_cast<std::size_t>(s.spatial + (s.spatial > 2 ? 2 : 0))] = std::numeric_limits<float>::quiet_NaN();
}

// The y the fused backward masks dy with: the CPU forward's (zeros where relu cut), the same
// for both sides so that a value rounding to either side of 0 cannot flip the mask, with the
// rule's edge cases poked in: NaN, -0 and -1 (masked), the smallest subnormal (passes).
std::vector<float> mask_from(std::vector<float> y) {
  const float poke[] = {std::numeric_limits<float>::quiet_NaN(), -0.0f, std::numeric_limits<float>::denorm_min(),
                        -1.0f};
  for (std::size_t i = 0; i < 4 && i < y.size(); ++i) y[i * 7 % y.size()] = poke[i];
  return y;
}

void check(const kernels::BatchNormShape& s, bool training, bool need_dx, bool relu = false) {
  const std::uint64_t data_seed = static_cast<std::uint64_t>(s.batch * 1000003 + s.channels * 101 + s.spatial);
  const auto n = static_cast<std::size_t>(s.batch * s.channels * s.spatial), C = static_cast<std::size_t>(s.channels);
  auto x = random_floats(n, data_seed, -2.0f, 3.0f);
  auto beta = random_floats(C, data_seed + 2), rm = random_floats(C, data_seed + 3);
  const auto gamma = random_floats(C, data_seed + 1, 0.5f, 1.5f), rv = random_floats(C, data_seed + 4, 0.5f, 2.0f);
  const auto dy = random_floats(n, data_seed + 5), dg = random_floats(C, data_seed + 6),
             db = random_floats(C, data_seed + 7);
  if (relu) relu_boundary(s, x, beta, rm);

  Result want{std::vector<float>(n), rm, rv, std::vector<float>(C), std::vector<float>(C), std::vector<float>(n), dg,
              db};
  kernels::cpu::batchnorm_forward(x.data(), gamma.data(), beta.data(), want.rm.data(), want.rv.data(),
                                  want.y.data(), want.sm.data(), want.si.data(), training, s, Ref::reference,
                                  relu ? kernels::Activation::relu : kernels::Activation::none);
  const std::vector<float> relu_y = relu ? mask_from(want.y) : std::vector<float>{};
  kernels::cpu::batchnorm_backward(x.data(), gamma.data(), want.sm.data(), want.si.data(), dy.data(),
                                   want.dx.data(), want.dg.data(), want.db.data(), training, s, Ref::reference,
                                   relu ? relu_y.data() : nullptr);
  INFO("batchnorm N " << s.batch << " C " << s.channels << " S " << s.spatial << (training ? " train" : " eval")
                      << (need_dx ? "" : " no-dx") << (relu ? " relu" : ""));
  if (relu) {  // the boundary is there: exact zeros, and about half of the rest cut
    const auto zeros = std::count(want.y.begin(), want.y.end(), 0.0f);
    REQUIRE(zeros >= s.batch * s.spatial);
    for (float v : want.y) REQUIRE(v >= 0.0f);
  }
  std::vector<float> first;
  for (std::uint64_t seed : kSeeds) {
    INFO("schedule seed " << seed);
    const Result got = run_simt(s, training, need_dx, x, gamma, beta, rm, rv, dy, dg, db, relu ? &relu_y : nullptr,
                                seed);
    // float sums over up to M values against the CPU's double sums.
    const double bound = 1e-5 * std::sqrt(static_cast<double>(s.per_channel())) + 2e-6;
    CHECK(scaled_error(got.y, want.y) < bound);
    CHECK(scaled_error(got.rm, want.rm) < bound);
    CHECK(scaled_error(got.rv, want.rv) < bound);
    CHECK(scaled_error(got.sm, want.sm) < bound);
    CHECK(scaled_error(got.si, want.si) < bound);
    CHECK(scaled_error(got.dg, want.dg) < bound);
    CHECK(scaled_error(got.db, want.db) < bound);
    if (need_dx) {
      // dx cancels (with two values per channel it is exactly 0): judge it on the scale of
      // its terms, gamma * invstd * dy.
      double terms = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t c = (i / static_cast<std::size_t>(s.spatial)) % C;
        terms = std::max(terms, std::fabs(static_cast<double>(gamma[c]) * want.si[c] * dy[i]));
      }
      CHECK(scaled_error(got.dx, want.dx, terms) < bound);
    } else {
      for (float v : got.dx) REQUIRE(std::isnan(v));  // not written
    }
    // Another schedule, the same bits.
    std::vector<float> all = got.y;
    for (const auto* v : {&got.rm, &got.rv, &got.dg, &got.db, &got.dx}) all.insert(all.end(), v->begin(), v->end());
    if (first.empty()) first = all;
    else REQUIRE(std::memcmp(all.data(), first.data(), all.size() * sizeof(float)) == 0);
  }
}

kernels::BatchNormShape bn(std::int64_t b, std::int64_t c, std::int64_t s) {
  kernels::BatchNormShape x;
  x.batch = b, x.channels = c, x.spatial = s;
  return x;
}

}  // namespace

TEST_CASE("batchnorm kernels under the SIMT executor match the CPU reference", "[simt][batchnorm]") {
  // 1d (spatial 1), 2d, odd sizes; 2 values per channel (a block of one warp), 7 (fewer
  // than a warp), 4096 (one chunk: a block walks 16 values per thread), 4097 and 9 x 1000
  // (several chunks a channel, the last one short).
  const kernels::BatchNormShape shapes[] = {bn(2, 1, 1),  bn(7, 3, 1),  bn(64, 33, 1),  bn(3, 5, 49),  bn(5, 7, 13),
                                            bn(1, 4, 7),  bn(16, 2, 256), bn(17, 2, 241), bn(9, 3, 1000)};
  for (const auto& s : shapes)
    for (bool training : {true, false})
      for (bool need_dx : {true, false}) check(s, training, need_dx);
}

TEST_CASE("batchnorm kernels with the fused relu under the SIMT executor match the CPU's fused batchnorm",
          "[simt][batchnorm]") {
  // Channels not a multiple of 32 (1, 3, 5, 33, 37) and 64; spatial 1 (BatchNorm1d, and the
  // channels-last layout) and > 1; one chunk a channel and several (9 x 1000).
  const kernels::BatchNormShape shapes[] = {bn(2, 1, 1),   bn(7, 3, 1),   bn(64, 33, 1), bn(300, 64, 1),
                                            bn(3, 5, 49),  bn(5, 37, 13), bn(1, 4, 7),   bn(9, 3, 1000)};
  for (const auto& s : shapes)
    for (bool training : {true, false})
      for (bool need_dx : {true, false}) check(s, training, need_dx, true);
}

TEST_CASE("global average pooling kernels under the SIMT executor match the CPU bit for bit", "[simt][avgpool]") {
  for (auto [rows, spatial] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {6, 49}, {300, 64}, {7, 13}, {33, 784}}) {
    INFO("rows " << rows << " spatial " << spatial);
    const auto n = static_cast<std::size_t>(rows * spatial);
    const auto x = random_floats(n, static_cast<std::uint64_t>(rows + spatial));
    const auto dy = random_floats(static_cast<std::size_t>(rows), static_cast<std::uint64_t>(rows * 7 + spatial));
    std::vector<float> y_want(static_cast<std::size_t>(rows)), dx_want(n);
    kernels::cpu::global_avgpool_forward(x.data(), y_want.data(), rows, spatial, Ref::reference);
    kernels::cpu::global_avgpool_backward(dy.data(), dx_want.data(), rows, spatial, Ref::reference);
    for (std::uint64_t seed : kSeeds) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      simt::DeviceBuffer<float> dxin(x), y(std::vector<float>(static_cast<std::size_t>(rows), nan)), ddy(dy),
          dx(std::vector<float>(n, nan));
      simt::launch(dev::global_avgpool_forward_kernel, config(shapes::elementwise(rows), seed), dxin.data(), y.data(),
                   rows, spatial);
      simt::launch(dev::global_avgpool_backward_kernel, config(shapes::elementwise(rows * spatial), seed), ddy.data(),
                   dx.data(), rows, spatial);
      REQUIRE(y.download() == y_want);
      REQUIRE(dx.download() == dx_want);
    }
  }
}

TEST_CASE("layernorm kernels under the SIMT executor match the CPU reference", "[simt][layernorm]") {
  for (auto [rows, features] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 33}, {5, 600}, {300, 17}}) {
    const kernels::LayerNormShape s{rows, features, 1e-5};
    const auto n = static_cast<std::size_t>(rows * features), F = static_cast<std::size_t>(features);
    const auto seed0 = static_cast<std::uint64_t>(rows * 31 + features);
    const auto x = random_floats(n, seed0, -2.0f, 3.0f), gamma = random_floats(F, seed0 + 1, 0.5f, 1.5f),
               beta = random_floats(F, seed0 + 2), dy = random_floats(n, seed0 + 3),
               dg = random_floats(F, seed0 + 4), db = random_floats(F, seed0 + 5);
    std::vector<float> y(n), sm(static_cast<std::size_t>(rows)), si(sm.size()), dx(n), dg_want = dg, db_want = db;
    kernels::cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), sm.data(), si.data(), s,
                                    Ref::reference);
    kernels::cpu::layernorm_backward(x.data(), gamma.data(), sm.data(), si.data(), dy.data(), dx.data(),
                                     dg_want.data(), db_want.data(), s, Ref::reference);
    INFO("rows " << rows << " features " << features);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::uint64_t seed : kSeeds) {
      simt::DeviceBuffer<float> dxin(x), dgamma(gamma), dbeta(beta), dyv(dy), gy(std::vector<float>(n, nan)),
          gsm(std::vector<float>(sm.size(), nan)), gsi(std::vector<float>(sm.size(), nan)),
          gdx(std::vector<float>(n, nan)), gdg(dg), gdb(db);
      const auto row_shape = config(shapes::layernorm_rows(rows, features), seed);
      simt::launch(dev::layernorm_forward_kernel, row_shape, dxin.data(), dgamma.data(), dbeta.data(), gy.data(),
                   gsm.data(), gsi.data(), features, 1e-5f);
      simt::launch(dev::layernorm_backward_dx_kernel, row_shape, dxin.data(), dgamma.data(), gsm.data(), gsi.data(),
                   dyv.data(), gdx.data(), features);
      simt::launch(dev::layernorm_backward_param_kernel, config(shapes::elementwise(features), seed), dxin.data(),
                   gsm.data(), gsi.data(), dyv.data(), gdg.data(), gdb.data(), rows, features);
      const double bound = 2e-5 * std::sqrt(static_cast<double>(std::max(rows, features))) + 2e-6;
      CHECK(scaled_error(gy.download(), y) < bound);
      CHECK(scaled_error(gsm.download(), sm) < bound);
      CHECK(scaled_error(gsi.download(), si) < bound);
      // dx cancels where a row has one feature (it is then exactly 0): the terms' scale.
      double terms = 0;
      for (std::size_t i = 0; i < n; ++i)
        terms = std::max(terms, std::fabs(static_cast<double>(gamma[i % F]) * si[i / F] * dy[i]));
      CHECK(scaled_error(gdx.download(), dx, terms) < bound);
      CHECK(scaled_error(gdg.download(), dg_want) < bound);
      CHECK(scaled_error(gdb.download(), db_want) < bound);
    }
  }
}
