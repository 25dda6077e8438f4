// The CUDA backend's elementwise and bias-gradient kernels (kernels/cuda/device/
// elementwise.cuh, bias_grad.cuh), run from their real source under the SIMT executor with
// the launcher's shapes (launch_shapes.hpp, bias_grad.cuh), against their CPU twins (kernels/cpu/activation, bias,
// elementwise), outputs poisoned, under several schedules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cuda/device/bias_grad.cuh"
#include "kernels/cuda/device/elementwise.cuh"
#include "tests/kernels/cuda_simt/simt_support.hpp"

namespace {

using namespace codistill;
using namespace codistill::test::simt_kernels;
namespace dev = kernels::cuda::device;
using kernels::Activation;
using Ref = kernels::cpu::Impl;

// The CPU twin of act_forward over n elements.
std::vector<float> cpu_act(Activation a, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  const auto n = static_cast<std::int64_t>(x.size());
  if (a == Activation::relu) kernels::cpu::relu_forward(x.data(), y.data(), n, Ref::reference);
  else if (a == Activation::gelu) kernels::cpu::gelu_forward(x.data(), y.data(), n, Ref::reference);
  else if (a == Activation::silu) kernels::cpu::silu_forward(x.data(), y.data(), n, Ref::reference);
  else if (a == Activation::gelu_tanh) kernels::cpu::gelu_tanh_forward(x.data(), y.data(), n, Ref::reference);
  else y = x;
  return y;
}

// dy * act'(.) from what the backward keeps (y for relu, x for gelu and silu).
std::vector<float> cpu_act_backward(Activation a, const std::vector<float>& saved,
                                    const std::vector<float>& dy) {
  std::vector<float> dx(dy.size());
  const auto n = static_cast<std::int64_t>(dy.size());
  if (a == Activation::relu) kernels::cpu::relu_backward(saved.data(), dy.data(), dx.data(), n, Ref::reference);
  else if (a == Activation::gelu) kernels::cpu::gelu_backward(saved.data(), dy.data(), dx.data(), n, Ref::reference);
  else if (a == Activation::silu) kernels::cpu::silu_backward(saved.data(), dy.data(), dx.data(), n, Ref::reference);
  else if (a == Activation::gelu_tanh)
    kernels::cpu::gelu_tanh_backward(saved.data(), dy.data(), dx.data(), n, Ref::reference);
  else dx = dy;
  return dx;
}

template <Activation A, class I>
void check_activation(std::int64_t M, std::int64_t N, std::uint64_t seed) {
  const std::int64_t n = M * N;
  const auto x = random_floats(n, seed, -3, 3), b = random_floats(N, seed + 1),
             dy = random_floats(n, seed + 2);
  const auto launch = config(shapes::elementwise(n), seed);
  INFO("activation " << static_cast<int>(A) << " M=" << M << " N=" << N << " index bytes "
                     << sizeof(I) << " seed " << seed);

  // bias + activation forward, in place, pre kept for gelu and silu
  std::vector<float> xb = x;
  kernels::cpu::bias_add_rows(xb.data(), b.data(), M, N, Ref::reference);
  simt::DeviceBuffer<float> y(x), db(b), pre(n);
  simt::launch(dev::bias_act_forward_kernel<A, I>, launch, y.data(), db.data(), pre.data(),
               static_cast<I>(n), static_cast<I>(N));
  CHECK(scaled_error(y.download(), cpu_act(A, xb)) <= 1e-6);
  if (kernels::keeps_input(A)) CHECK(pre.download() == xb);
  else for (float v : pre.download()) REQUIRE(std::isnan(v));  // not written

  // plain forward into a separate (poisoned) output
  simt::DeviceBuffer<float> dx_in(x), out(n);
  simt::launch(dev::act_forward_kernel<A, I>, launch, dx_in.data(), out.data(), static_cast<I>(n));
  CHECK(scaled_error(out.download(), cpu_act(A, x)) <= 1e-6);

  // backward, in place over dy (dx aliases dy)
  const auto saved = A == Activation::relu ? cpu_act(A, x) : x;
  simt::DeviceBuffer<float> dsaved(saved), ddy(dy);
  simt::launch(dev::act_backward_kernel<A, I>, launch, A == Activation::none ? nullptr : dsaved.data(),
               ddy.data(), ddy.data(), static_cast<I>(n));
  CHECK(scaled_error(ddy.download(), cpu_act_backward(A, saved, dy)) <= 1e-6);
}

// colsum_kernel (+ colsum_finish_kernel): dpre = dy * act', db (+)= its column sums.
template <Activation A>
void check_column_sums(std::int64_t M, std::int64_t N, bool accumulate, bool write_dpre,
                       std::uint64_t seed) {
  const auto x = random_floats(M * N, seed, -2, 2), dy = random_floats(M * N, seed + 1);
  const auto saved = A == Activation::relu ? cpu_act(A, x) : x;
  const auto dpre_want = cpu_act_backward(A, saved, dy);
  std::vector<float> db_want = random_floats(N, seed + 2);
  const std::vector<float> db_init = db_want;
  kernels::cpu::bias_grad_rows(dpre_want.data(), db_want.data(), M, N, accumulate, Ref::reference);

  const auto shape = shapes::column_sums(M, N);
  INFO("column sums M=" << M << " N=" << N << " chunks " << shape.chunks << " seed " << seed);
  simt::DeviceBuffer<float> ddy(dy), dsaved(saved), dpre(M * N), db(db_init);
  simt::DeviceBuffer<double> partial(static_cast<std::size_t>(shape.chunks * N));
  simt::launch(dev::colsum_kernel<A>, config(shape.sums, seed), ddy.data(),
               A == Activation::none ? nullptr : dsaved.data(), write_dpre ? dpre.data() : nullptr,
               M, N, shape.rows, shape.chunks > 1 ? partial.data() : nullptr, db.data(), accumulate);
  if (shape.chunks > 1)
    simt::launch(dev::colsum_finish_kernel, config(shape.finish, seed), partial.data(),
                 shape.chunks, N, db.data(), accumulate);
  // Accumulating, db_init's terms may cancel the sums (db_want near 0): judged on the terms'
  // scale, not the result's (a rounding of dpre is relative to dpre).
  double terms = 1e-6;
  for (float v : db_init) terms = std::max(terms, accumulate ? static_cast<double>(std::fabs(v)) : 0.0);
  CHECK(scaled_error(db.download(), db_want, terms) <= 1e-6);
  if (write_dpre) CHECK(scaled_error(dpre.download(), dpre_want) <= 1e-6);
  else for (float v : dpre.download()) REQUIRE(std::isnan(v));
}

}  // namespace

TEST_CASE("simt: bias + activation forward, activations and their backward", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    for (const auto& [M, N] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 70}, {257, 131}}) {
      check_activation<Activation::none, std::uint32_t>(M, N, seed);
      check_activation<Activation::relu, std::uint32_t>(M, N, seed);
      check_activation<Activation::gelu, std::uint32_t>(M, N, seed);
      check_activation<Activation::gelu, std::uint64_t>(M, N, seed);
      check_activation<Activation::silu, std::uint32_t>(M, N, seed);
      check_activation<Activation::silu, std::uint64_t>(M, N, seed);
      check_activation<Activation::gelu_tanh, std::uint32_t>(M, N, seed);
    }
  }
}

TEST_CASE("simt: a grid smaller than the data strides over all of it", "[simt]") {
  const std::int64_t n = 5000;
  const auto a = random_floats(n, 1), b = random_floats(n, 2);
  std::vector<float> want(n);
  kernels::cpu::add(a.data(), b.data(), want.data(), n, Ref::reference);
  simt::DeviceBuffer<float> da(a), db(b);
  // y aliases a: each element is read before it is written.
  simt::launch(dev::add_kernel<std::uint32_t>, config({{3}, {256}, 0}, 9), da.data(), db.data(),
               da.data(), static_cast<std::uint32_t>(n));
  CHECK(da.download() == want);
}

TEST_CASE("simt: channel bias, multiply and add", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    const std::int64_t B = 3, C = 5, S = 49, n = B * C * S;
    const auto x = random_floats(n, seed), b = random_floats(C, seed + 1),
               m = random_floats(n, seed + 2, 0, 2);
    std::vector<float> want = x;
    kernels::cpu::bias_add_channels(want.data(), b.data(), B, C, S, Ref::reference);
    simt::DeviceBuffer<float> y(x), dbias(b), dm(m), out(n);
    const auto launch = config(shapes::elementwise(n), seed);
    simt::launch(dev::bias_channels_kernel<std::uint32_t>, launch, y.data(), dbias.data(),
                 static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(C),
                 static_cast<std::uint32_t>(S));
    CHECK(y.download() == want);

    kernels::cpu::multiply(x.data(), m.data(), want.data(), n, Ref::reference);
    simt::DeviceBuffer<float> dx(x);
    simt::launch(dev::multiply_kernel<std::uint64_t>, launch, dx.data(), dm.data(), out.data(),
                 static_cast<std::uint64_t>(n));
    CHECK(out.download() == want);

    kernels::cpu::add(x.data(), m.data(), want.data(), n, Ref::reference);
    simt::launch(dev::add_kernel<std::uint32_t>, launch, dx.data(), dm.data(), dm.data(),
                 static_cast<std::uint32_t>(n));  // y aliases b
    CHECK(dm.download() == want);
  }
}

// add_kernel with the fused relu (Op::add_activation) against the CPU's add_relu, bit for
// bit (the sum is one rounding on both): y poisoned or aliasing a or b; inputs with relu's
// edge cases at the front: NaN (-> 0), sums of exactly 0 and -0 (-> +0), the smallest
// subnormal sum (passes), an infinity cancelling into NaN (-> 0).
template <class I>
void check_add_relu(std::int64_t n, int alias, const simt::LaunchConfig& launch) {
  const auto data_seed = static_cast<std::uint64_t>(n);
  auto a = random_floats(n, data_seed + 11), b = random_floats(n, data_seed + 12);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float edge[][2] = {{nan, 1.0f},   {0.25f, -0.25f}, {-0.0f, -0.0f},
                           {std::numeric_limits<float>::denorm_min(), 0.0f}, {inf, -inf}, {-3.0f, 1.0f}};
  for (std::size_t i = 0; i < std::size(edge) && i < a.size(); ++i) a[i] = edge[i][0], b[i] = edge[i][1];
  std::vector<float> want(a.size());
  kernels::cpu::add_relu(a.data(), b.data(), want.data(), n, Ref::reference);
  INFO("add+relu n=" << n << " alias " << alias << " index bytes " << sizeof(I) << " grid " << launch.grid.x);
  simt::DeviceBuffer<float> da(a), db(b), out(std::vector<float>(a.size(), nan));
  float* y = alias == 1 ? da.data() : alias == 2 ? db.data() : out.data();
  simt::launch(dev::add_kernel<I, Activation::relu>, launch, da.data(), db.data(), y, static_cast<I>(n));
  const auto got = (alias == 1 ? da : alias == 2 ? db : out).download();
  REQUIRE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  if (n > 5) CHECK(std::count(want.begin(), want.end(), 0.0f) > n / 4);  // the relu cut something
}

TEST_CASE("simt: add with the fused relu, y poisoned or aliasing a or b", "[simt]") {
  for (const std::uint64_t seed : kSeeds)
    for (std::int64_t n : {1, 6, 33, 4099})
      for (int alias : {0, 1, 2}) {
        check_add_relu<std::uint32_t>(n, alias, config(shapes::elementwise(n), seed));
        check_add_relu<std::uint64_t>(n, alias, config(shapes::elementwise(n), seed));
      }
  check_add_relu<std::uint32_t>(5000, 1, config({{3}, {256}, 0}, 9));  // a grid striding over the data
}

TEST_CASE("simt: row bias gradients, one chunk and several (colsum + colsum_finish)", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    for (const auto& [M, N] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {40, 33}, {700, 70}}) {
      check_column_sums<Activation::none>(M, N, false, false, seed);
      check_column_sums<Activation::relu>(M, N, true, true, seed);
      check_column_sums<Activation::gelu>(M, N, false, true, seed);
      check_column_sums<Activation::silu>(M, N, true, true, seed);
      check_column_sums<Activation::gelu_tanh>(M, N, true, true, seed);
    }
  }
}

TEST_CASE("simt: channel bias gradients, one chunk and several", "[simt]") {
  for (const std::uint64_t seed : kSeeds) {
    for (const auto& [B, C, S] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{2, 3, 5},
                                  {4, 6, 784}, {2100, 2, 16}}) {
      for (const bool accumulate : {false, true}) {
        const auto dy = random_floats(B * C * S, seed);
        std::vector<float> want = random_floats(C, seed + 1);
        const auto init = want;
        kernels::cpu::bias_grad_channels(dy.data(), want.data(), B, C, S, accumulate, Ref::reference);
        const auto shape = shapes::channel_sums(B, C, S);
        INFO("B=" << B << " C=" << C << " S=" << S << " chunks " << shape.chunks);
        simt::DeviceBuffer<float> ddy(dy), db(init);
        simt::DeviceBuffer<double> partial(static_cast<std::size_t>(shape.chunks * C));
        simt::launch(dev::channel_sum_kernel, config(shape.sums, seed), ddy.data(), B, C, S,
                     shape.images, shape.chunks > 1 ? partial.data() : nullptr, db.data(),
                     accumulate);
        if (shape.chunks > 1)
          simt::launch(dev::colsum_finish_kernel, config(shape.finish, seed), partial.data(),
                       shape.chunks, C, db.data(), accumulate);
        CHECK(scaled_error(db.download(), want) <= 1e-6);
        if (B == 2100) CHECK(shape.chunks > 1);
      }
    }
  }
}
