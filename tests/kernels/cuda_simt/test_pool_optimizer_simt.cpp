// The CUDA backend's max pooling and optimizer kernels (kernels/cuda/device/pool.cuh,
// optimizer.cuh), run from their real source under the SIMT executor with the launcher's
// shapes (launch_shapes.hpp, optimizer.cuh), against their CPU twins (kernels/cpu/image/pool,
// kernels/cpu/optimizer): ties and NaN in pooling windows, overlapping windows, SGD (plain,
// momentum, Nesterov, weight decay, gradients scaled) and AdamW over several slices (a table)
// and one (by value), aligned and not; the gradients' sum of squares (clipping).
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/image/pool.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/cuda/device/optimizer.cuh"
#include "kernels/cuda/device/pool.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
using Ref = kernels::cpu::Impl;

void check_pool(const kernels::Pool2dShape& s, std::vector<float> x, std::uint64_t seed) {
  const std::int64_t in = s.batch * s.channels * s.height * s.width;
  const std::int64_t out = s.batch * s.channels * s.out_height() * s.out_width();
  const auto dy = random_floats(out, seed + 5);
  std::vector<float> y_want(out), dx_want(in);
  std::vector<std::int32_t> argmax(out);
  kernels::cpu::maxpool2d_forward(x.data(), y_want.data(), argmax.data(), s, Ref::reference);
  kernels::cpu::maxpool2d_backward(dy.data(), argmax.data(), dx_want.data(), s, Ref::reference);
  const dev::PoolDims d{s.height, s.width, s.kernel, s.stride, s.out_height(), s.out_width()};
  INFO("pool " << s.batch << "x" << s.channels << "x" << s.height << "x" << s.width << " k"
               << s.kernel << " s" << s.stride << " seed " << seed);
  simt::DeviceBuffer<float> dxin(x), y(out), ddy(dy), dx(in);
  simt::launch(dev::maxpool_forward_kernel, config(shapes::elementwise(out), seed), dxin.data(),
               y.data(), out, d);
  const auto y_got = y.download();
  for (std::int64_t i = 0; i < out; ++i) {
    if (std::isnan(y_want[i])) REQUIRE(std::isnan(y_got[i]));
    else REQUIRE(y_got[i] == y_want[i]);
  }
  simt::launch(dev::maxpool_backward_kernel, config(shapes::elementwise(in), seed), dxin.data(),
               ddy.data(), dx.data(), in, d);
  // The same windows chosen and the same sums in the same order: bit for bit.
  REQUIRE(dx.download() == dx_want);
}

// One optimizer problem: slices of these sizes, each with its own buffers.
struct Slices {
  std::vector<std::unique_ptr<simt::DeviceBuffer<float>>> bufs;  // p, g, s0, s1 per slice
  std::vector<std::vector<float>> p, g, s0, s1;
};

Slices make_slices(const std::vector<std::int64_t>& sizes, std::uint64_t seed, std::size_t skew) {
  Slices s;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const auto n = static_cast<std::size_t>(sizes[k]);
    s.p.push_back(random_floats(n, seed + 10 * k));
    s.g.push_back(random_floats(n, seed + 10 * k + 1));
    s.s0.push_back(random_floats(n, seed + 10 * k + 2, -0.1f, 0.1f));
    s.s1.push_back(random_floats(n, seed + 10 * k + 3, 0.0f, 0.01f));
    for (auto* v : {&s.p[k], &s.g[k], &s.s0[k], &s.s1[k]})
      s.bufs.push_back(std::make_unique<simt::DeviceBuffer<float>>(*v, k % 2 ? skew : 0));
  }
  return s;
}

// Runs one step over the slices (a table when several, by value when one).
template <class Op>
void run_step(Slices& s, const Op& op, bool slot0, bool slot1, std::uint64_t seed) {
  std::vector<dev::DevSlice> table;
  std::int64_t chunks = 0;
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  for (std::size_t k = 0; k < s.p.size(); ++k) {
    dev::DevSlice d{s.bufs[4 * k]->data(), s.bufs[4 * k + 1]->data(),
                    slot0 ? s.bufs[4 * k + 2]->data() : nullptr,
                    slot1 ? s.bufs[4 * k + 3]->data() : nullptr,
                    static_cast<std::int64_t>(s.p[k].size()), chunks, 0, 0};
    d.vec4 = aligned16(d.value) && aligned16(d.grad) && aligned16(d.slot0) && aligned16(d.slot1);
    table.push_back(d);
    chunks += (d.n + shapes::kOptimizerChunk - 1) / shapes::kOptimizerChunk;
  }
  const auto launch = config(shapes::optimizer(chunks), seed);
  if (table.size() == 1) {
    simt::launch(dev::step_one_kernel<Op>, launch, table[0], op);
  } else {
    simt::DeviceBuffer<dev::DevSlice> dtable(table);
    simt::launch(dev::step_kernel<Op>, launch, dtable.data(), static_cast<int>(table.size()), op);
  }
}

}  // namespace

TEST_CASE("simt: max pooling forward and backward, ties, NaN, overlapping windows", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    const kernels::Pool2dShape a{2, 3, 8, 8, 2, 2}, b{1, 2, 7, 9, 3, 2}, c{3, 1, 28, 28, 2, 2};
    check_pool(a, random_floats(2 * 3 * 64, seed), seed);
    check_pool(c, random_floats(3 * 784, seed), seed);
    // Ties everywhere (small integers) and overlapping windows (stride < kernel).
    auto ties = random_floats(2 * 63, seed);
    for (auto& v : ties) v = std::floor(v * 2);
    check_pool(b, ties, seed);
    // NaN: the first NaN in a window wins, forward and backward.
    auto nans = random_floats(2 * 63, seed + 1);
    nans[5] = nans[17] = nans[40] = NAN;
    check_pool(b, nans, seed);
  }
}

TEST_CASE("simt: SGD and AdamW kernels match the CPU updates bit for bit", "[simt]") {
  const std::vector<std::vector<std::int64_t>> layouts = {
      {1}, {4096}, {10001}, {3, 4096, 5000, 17, 9000}};
  for (const std::uint64_t seed : kSeeds) {
    for (const auto& sizes : layouts) {
      for (const std::size_t skew : {0, 4}) {  // odd slices 4 bytes off: scalar path
        for (int variant = 0; variant < 6; ++variant) {
          INFO("slices " << sizes.size() << " first " << sizes[0] << " skew " << skew
                         << " variant " << variant << " seed " << seed);
          Slices s = make_slices(sizes, seed, skew);
          // Variants 4 and 5: 2 and 3 (Nesterov, AdamW) with the gradients scaled (clipping).
          const int kind = variant < 4 ? variant : variant - 2;
          const double gs = variant < 4 ? 1.0 : 0.37;
          if (kind < 3) {
            kernels::SgdScalars k{0.05, kind == 0 ? 0.0 : 1e-3, kind == 0 ? 0.0 : 0.9, kind == 2, gs};
            const kernels::cuda::SgdScalars f{static_cast<float>(k.lr),
                                              static_cast<float>(k.weight_decay),
                                              static_cast<float>(k.momentum), k.nesterov,
                                              static_cast<float>(gs)};
            const bool momentum = k.momentum != 0;
            run_step(s, dev::SgdOp{f}, momentum, false, seed);
            for (std::size_t j = 0; j < sizes.size(); ++j) {
              auto p = s.p[j], b = s.s0[j];
              kernels::cpu::sgd_update(p.data(), s.g[j].data(), momentum ? b.data() : nullptr,
                                       sizes[j], k, Ref::reference);
              REQUIRE(s.bufs[4 * j]->download() == p);
              if (momentum) REQUIRE(s.bufs[4 * j + 2]->download() == b);
            }
          } else {
            kernels::AdamWScalars k{1 - 1e-4, 0.9, 0.999, 1e-3, 1.0 / std::sqrt(1 - 0.999 * 0.999), 1e-8, gs};
            const kernels::cuda::AdamWScalars f{
                static_cast<float>(k.decay), static_cast<float>(k.beta1),
                static_cast<float>(k.beta2), static_cast<float>(k.step_size),
                static_cast<float>(k.inv_sqrt_bc2), static_cast<float>(k.eps),
                static_cast<float>(gs)};
            run_step(s, dev::AdamWOp{f}, true, true, seed);
            for (std::size_t j = 0; j < sizes.size(); ++j) {
              auto p = s.p[j], m = s.s0[j], v = s.s1[j];
              kernels::cpu::adamw_update(p.data(), s.g[j].data(), m.data(), v.data(), sizes[j], k,
                                         Ref::reference);
              REQUIRE(s.bufs[4 * j]->download() == p);
              REQUIRE(s.bufs[4 * j + 2]->download() == m);
              REQUIRE(s.bufs[4 * j + 3]->download() == v);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("simt: the sum of squares matches the CPU's, the same bits each run", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{255}, shapes::kSumSquaresChunk,
                                 shapes::kSumSquaresChunk + 1, std::int64_t{3} * shapes::kSumSquaresChunk + 77}) {
      INFO("n " << n << " seed " << seed);
      const auto x = random_floats(n, seed);
      const double want = kernels::cpu::sum_squares(x.data(), n, Ref::reference);
      const auto shape = shapes::sum_squares(n);
      simt::DeviceBuffer<float> dx(x);
      auto sum_once = [&](std::uint64_t schedule_seed) {
        simt::DeviceBuffer<double> partials(static_cast<std::size_t>(shape.grid.x));
        simt::launch(dev::sum_squares_kernel, config(shape, schedule_seed), dx.data(), n, partials.data());
        double s = 0;
        for (double p : partials.download()) s += p;  // in block order, as the launcher adds them
        return s;
      };
      const double got = sum_once(seed);
      CHECK(std::abs(got - want) <= 1e-12 * want);
      CHECK(sum_once(seed + 1) == got);  // another thread schedule, the same bits
    }
  }
}
