// conv2d: fast (im2col + GEMM, grouped images, threads) vs the direct reference,
// finite-difference gradients, accumulate / null paths, bad shapes, determinism.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/image/conv2d.hpp"
#include "support/test_util.hpp"

using namespace codistill::kernels::cpu;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::poisoned;
using codistill::test::random_vector;
using codistill::test::kGradFloor;
using codistill::test::kGradTolerance;
using codistill::test::tolerance;
using codistill::test::rel_error;

namespace {

struct Case {
  std::int64_t B, C, H, W, O, KH, KW, SH, SW, PH, PW;
};

Conv2dShape make(const Case& c) {
  Conv2dShape s;
  s.batch = c.B;
  s.in_channels = c.C;
  s.height = c.H;
  s.width = c.W;
  s.out_channels = c.O;
  s.kernel_h = c.KH;
  s.kernel_w = c.KW;
  s.stride_h = c.SH;
  s.stride_w = c.SW;
  s.pad_h = c.PH;
  s.pad_w = c.PW;
  return s;
}

std::size_t in_size(const Conv2dShape& s) { return s.batch * s.in_channels * s.height * s.width; }
std::size_t out_size(const Conv2dShape& s) {
  return s.batch * s.out_channels * s.out_height() * s.out_width();
}
std::size_t w_size(const Conv2dShape& s) {
  return s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << "B" << c.B << " C" << c.C << " " << c.H << "x" << c.W << " O" << c.O << " k" << c.KH << "x"
     << c.KW << " s" << c.SH << "x" << c.SW << " p" << c.PH << "x" << c.PW;
  return os.str();
}

}  // namespace

TEMPLATE_TEST_CASE("fast conv2d matches reference", "[conv2d]", float, double) {
  using T = TestType;
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const int threads = GENERATE(1, 2, 3);
  set_num_threads(threads);
  INFO("threads " << threads);
  const Case c = GENERATE(values<Case>({
      {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
      {3, 1, 28, 28, 8, 5, 5, 1, 1, 2, 2},    // first CNN layer (fewer filters)
      {4, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2},  // second CNN layer
      {3, 3, 9, 11, 5, 3, 3, 2, 2, 1, 1},     // stride 2, odd sizes
      {7, 4, 3, 3, 6, 3, 3, 1, 1, 1, 1},      // 9 outputs per image: grouped GEMMs
      {17, 3, 2, 3, 4, 2, 2, 1, 1, 0, 0},     // 2 outputs per image, odd batch
      {5, 2, 7, 5, 3, 1, 1, 1, 1, 0, 0},      // 1x1: the image is its own im2col
      {2, 3, 8, 8, 4, 1, 1, 2, 2, 0, 0},      // strided 1x1
      {2, 2, 10, 7, 3, 3, 5, 1, 2, 0, 2},     // non-square kernel, stride and padding
      {3, 2, 5, 5, 2, 5, 5, 1, 1, 0, 0},      // kernel covers the input: 1x1 output
      {2, 3, 4, 4, 2, 7, 7, 1, 1, 2, 2},      // kernel wider than the unpadded input
      {9, 5, 6, 6, 7, 3, 3, 3, 3, 2, 2},      // stride 3 with wide padding
  }));
  INFO(describe(c));
  const auto s = make(c);
  const auto x = random_vector<T>(in_size(s), seed), w = random_vector<T>(w_size(s), seed + 1);
  const auto b = random_vector<T>(s.out_channels, seed + 2);
  const auto dy = random_vector<T>(out_size(s), seed + 3);

  for (bool bias : {true, false}) {
    INFO("bias " << bias);
    auto y_ref = poisoned<T>(out_size(s)), y_fast = poisoned<T>(out_size(s));
    conv2d_forward<T>(x.data(), w.data(), bias ? b.data() : nullptr, y_ref.data(), s, Impl::reference);
    conv2d_forward<T>(x.data(), w.data(), bias ? b.data() : nullptr, y_fast.data(), s, Impl::fast);
    CHECK(rel_error(y_fast, y_ref) < tolerance<T>());
  }

  for (bool acc : {false, true}) {
    INFO("accumulate " << acc);
    const auto w0 = random_vector<T>(w_size(s), seed + 4), b0 = random_vector<T>(s.out_channels, seed + 5);
    auto dx_ref = poisoned<T>(in_size(s)), dx_fast = poisoned<T>(in_size(s));
    auto dw_ref = acc ? w0 : poisoned<T>(w_size(s)), dw_fast = dw_ref;
    auto db_ref = acc ? b0 : poisoned<T>(s.out_channels), db_fast = db_ref;
    conv2d_backward<T>(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), db_ref.data(),
                       s, acc, Impl::reference);
    conv2d_backward<T>(x.data(), w.data(), dy.data(), dx_fast.data(), dw_fast.data(),
                       db_fast.data(), s, acc, Impl::fast);
    CHECK(rel_error(dx_fast, dx_ref) < tolerance<T>());
    CHECK(rel_error(dw_fast, dw_ref) < tolerance<T>());
    CHECK(rel_error(db_fast, db_ref) < tolerance<T>());

    // dx and db skipped when null; dw unchanged by that.
    auto dw_nodx = acc ? w0 : poisoned<T>(w_size(s));
    conv2d_backward<T>(x.data(), w.data(), dy.data(), nullptr, dw_nodx.data(), nullptr, s, acc,
                       Impl::fast);
    CHECK(rel_error(dw_nodx, dw_ref) < tolerance<T>());
  }
  set_num_threads(2);
}

TEST_CASE("conv2d gradients match finite differences", "[conv2d][gradcheck]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  INFO("impl " << (impl == Impl::fast ? "fast" : "reference"));
  set_num_threads(2);
  const Case c = GENERATE(values<Case>({
      {2, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1},  // same padding
      {2, 2, 6, 7, 2, 3, 2, 2, 1, 1, 0},  // strides and asymmetric padding
      {3, 1, 4, 4, 2, 1, 1, 1, 1, 0, 0},  // 1x1
      {5, 2, 3, 3, 2, 3, 3, 1, 1, 1, 1},  // small maps: grouped path
  }));
  INFO(describe(c));
  const auto s = make(c);
  auto x = random_vector<double>(in_size(s), seed), w = random_vector<double>(w_size(s), seed + 1);
  auto b = random_vector<double>(s.out_channels, seed + 2);
  const auto r = random_vector<double>(out_size(s), seed + 3);
  auto f = [&] {
    std::vector<double> y(out_size(s));
    conv2d_forward<double>(x.data(), w.data(), b.data(), y.data(), s, impl);
    double acc = 0;
    for (std::size_t i = 0; i < y.size(); ++i) acc += y[i] * r[i];
    return acc;
  };
  auto ptrs = [](std::vector<double>& v) {
    std::vector<double*> p;
    for (auto& e : v) p.push_back(&e);
    return p;
  };
  auto dx = poisoned<double>(x.size()), dw = poisoned<double>(w.size()), db = poisoned<double>(b.size());
  conv2d_backward<double>(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), s, false,
                          impl);
  CHECK(max_rel_error(dx, numeric_gradient(f, ptrs(x)), kGradFloor) < kGradTolerance);
  CHECK(max_rel_error(dw, numeric_gradient(f, ptrs(w)), kGradFloor) < kGradTolerance);
  CHECK(max_rel_error(db, numeric_gradient(f, ptrs(b)), kGradFloor) < kGradTolerance);
}

TEST_CASE("fast conv2d backward is bit-reproducible", "[conv2d]") {
  const auto seed = fresh_seed();
  INFO("seed " << seed);
  const int threads = GENERATE(2, 3);
  set_num_threads(threads);
  INFO("threads " << threads);
  const Case c = GENERATE(values<Case>({{16, 8, 14, 14, 16, 5, 5, 1, 1, 2, 2},
                                        {13, 4, 3, 3, 8, 3, 3, 1, 1, 1, 1}}));
  INFO(describe(c));
  const auto s = make(c);
  const auto x = random_vector<float>(in_size(s), seed), w = random_vector<float>(w_size(s), seed + 1);
  const auto dy = random_vector<float>(out_size(s), seed + 2);
  std::vector<float> dx1(in_size(s)), dx2(in_size(s)), dw1(w_size(s)), dw2(w_size(s));
  std::vector<float> db1(s.out_channels), db2(s.out_channels);
  conv2d_backward<float>(x.data(), w.data(), dy.data(), dx1.data(), dw1.data(), db1.data(), s, false);
  conv2d_backward<float>(x.data(), w.data(), dy.data(), dx2.data(), dw2.data(), db2.data(), s, false);
  CHECK(std::memcmp(dw1.data(), dw2.data(), dw1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(db1.data(), db2.data(), db1.size() * sizeof(float)) == 0);
  set_num_threads(2);
}

TEST_CASE("conv2d rejects impossible shapes", "[conv2d]") {
  std::vector<float> buf(4096);
  const Impl impl = GENERATE(Impl::reference, Impl::fast);
  for (const Case& c : std::vector<Case>{
           {1, 1, 4, 4, 1, 7, 3, 1, 1, 1, 1},  // kernel taller than the padded input
           {1, 1, 4, 4, 1, 3, 5, 1, 1, 0, 0},  // kernel wider than the input
           {0, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0},  // empty batch
           {1, 0, 4, 4, 1, 3, 3, 1, 1, 0, 0},  // no input channels
           {1, 1, 4, 4, 0, 3, 3, 1, 1, 0, 0},  // no output channels
           {1, 1, 0, 4, 1, 1, 1, 1, 1, 0, 0},  // zero height
           {1, 1, 4, 4, 1, 0, 3, 1, 1, 0, 0},  // zero kernel
           {1, 1, 4, 4, 1, 3, 3, 0, 1, 0, 0},  // zero stride
           {1, 1, 4, 4, 1, 3, 3, 1, 1, -1, 0},  // negative padding
       }) {
    INFO(describe(c));
    const auto s = make(c);
    CHECK_THROWS_AS(s.validate(), std::invalid_argument);
    CHECK_THROWS_AS(conv2d_forward<float>(buf.data(), buf.data(), nullptr, buf.data(), s, impl),
                    std::invalid_argument);
    CHECK_THROWS_AS(conv2d_backward<float>(buf.data(), buf.data(), buf.data(), buf.data(),
                                           buf.data(), nullptr, s, false, impl),
                    std::invalid_argument);
  }
  CHECK_NOTHROW(make({1, 1, 4, 4, 1, 6, 6, 1, 1, 1, 1}).validate());  // exactly fits with padding
}
