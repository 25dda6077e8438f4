// Finite-difference gradient checks (double precision, reference and fast ops) of every
// layer: objective sum(y * r) for a random r, so dL/dy = r. Checks dx and every parameter
// gradient, that gradients accumulate across backward calls, and that need_dx = false
// still yields the parameter gradients.
#include <cstring>
#include <functional>
#include <tuple>

#include "codistill/nn/layers/attention.hpp"
#include "codistill/nn/layers/conv2d.hpp"
#include "codistill/nn/layers/embedding.hpp"
#include "codistill/nn/layers/position_embedding.hpp"
#include "codistill/nn/blocks/transformer_block.hpp"
#include "codistill/nn/layers/dropout.hpp"
#include "codistill/nn/layers/flatten.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/avgpool.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/layers/layernorm.hpp"
#include "codistill/nn/layers/linear.hpp"
#include "codistill/nn/layers/maxpool2d.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/cpu/impl.hpp"
#include "support/gradcheck.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::DType;
using codistill::kernels::Shape;
using codistill::kernels::Tensor;
using codistill::kernels::cpu::Impl;
using codistill::test::fresh_seed;
using codistill::test::max_rel_error;
using codistill::test::numeric_gradient;
using codistill::test::random_vector;

namespace {

using test::check_gradients;
using test::kTol;
using test::pointers;
using test::random_tensor;
using test::values;

const Impl kImpls[] = {Impl::reference, Impl::fast};

// Distinct values 0.01 apart in shuffled order: no ties within a pooling window, and a
// finite-difference step cannot change which element wins.
Tensor distinct_tensor(const Shape& shape, std::uint64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(i) - 0.3;
  Rng rng(seed);
  shuffle(v.begin(), v.size(), rng);
  return Tensor::from_vector(shape, v);
}

}  // namespace

TEST_CASE("Linear gradients match finite differences", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    Linear fc(4, 5);
    fc.init_params(rng, "kaiming_uniform");
    check_gradients(fc, random_tensor({3, 4}, seed + 1), seed, impl);
    Linear no_bias(6, 2, /*bias=*/false);
    no_bias.init_params(rng, "xavier_uniform");
    REQUIRE(no_bias.params().size() == 1);
    check_gradients(no_bias, random_tensor({4, 6}, seed + 2), seed, impl);
  }
}

TEST_CASE("Conv2d gradients match finite differences", "[nn][gradcheck]") {
  struct Case {
    std::int64_t in, out, k, stride, pad;
    Shape x;
  };
  const Case cases[] = {
      {2, 3, 3, 1, Conv2d::kSamePadding, {2, 2, 5, 6}},  // 'same' padding
      {2, 3, 3, 2, 0, {2, 2, 7, 6}},                     // stride 2, no padding
      {1, 2, 2, 1, 0, {1, 1, 4, 5}},                     // even kernel
      {3, 2, 5, 2, 1, {2, 3, 6, 7}},                     // stride and partial padding
  };
  for (const Case& c : cases) {
    for (Impl impl : kImpls) {
      const auto seed = fresh_seed();
      INFO("seed " << seed << ", k " << c.k << ", stride " << c.stride << ", pad " << c.pad);
      Rng rng(seed);
      Conv2d conv(c.in, c.out, c.k, c.stride, c.pad);
      conv.init_params(rng, "kaiming_uniform");
      check_gradients(conv, random_tensor(c.x, seed + 1), seed, impl);
    }
  }
}

TEST_CASE("ReLU and GELU gradients match finite differences", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    // ReLU: inputs kept at least 0.1 away from the kink at zero.
    std::vector<double> v = random_vector<double>(2 * 3 * 4, seed, 0.1, 1.0);
    Rng signs(seed);
    for (auto& e : v) e = signs.uniform() < 0.5 ? -e : e;
    ReLU relu;
    check_gradients(relu, Tensor::from_vector({2, 3, 4}, v), seed, impl);
    GELU gelu;
    check_gradients(gelu, random_tensor({3, 7}, seed + 1, -3, 3), seed, impl);
  }
}

TEST_CASE("MaxPool2d gradients match finite differences", "[nn][gradcheck]") {
  struct Case {
    std::int64_t k, stride;
    Shape x;
  };
  const Case cases[] = {{2, 0, {2, 3, 4, 6}}, {2, 0, {1, 2, 5, 5}}, {3, 2, {2, 2, 7, 7}}};
  for (const Case& c : cases) {
    for (Impl impl : kImpls) {
      const auto seed = fresh_seed();
      INFO("seed " << seed << ", k " << c.k << ", stride " << c.stride);
      MaxPool2d pool(c.k, c.stride);
      check_gradients(pool, distinct_tensor(c.x, seed), seed, impl);
    }
  }
}

TEST_CASE("Flatten gradients match finite differences", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Flatten flat;
    Tensor x = random_tensor({2, 3, 2, 2}, seed);
    CHECK(flat.forward(x, true).shape() == Shape{2, 12});
    check_gradients(flat, x, seed, impl);
  }
}

TEST_CASE("Dropout gradients match finite differences with a fixed mask", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Rng init(seed);
    Dropout drop(0.3);
    drop.init_params(init, "kaiming_uniform");
    const Rng::State state = drop.rng()->state();
    check_gradients(drop, random_tensor({4, 10}, seed + 1), seed, impl,
                    [&] { drop.rng()->set_state(state); });
    // And directly: dx = dy * mask / (1 - p), the mask being that of the forward.
    Tensor x = random_tensor({4, 10}, seed + 2);
    Tensor dy = random_tensor({4, 10}, seed + 3);
    const std::vector<double> y = values(drop.forward(x, true));
    const std::vector<double> dx = values(drop.backward(dy));
    int dropped = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const bool kept = y[i] != 0.0;
      dropped += kept ? 0 : 1;
      CHECK(dx[i] == Approx(kept ? dy.data<double>()[i] / 0.7 : 0.0).margin(1e-15));
      if (kept) CHECK(y[i] == Approx(x.data<double>()[i] / 0.7));
    }
    CHECK(dropped > 0);
    CHECK(dropped < x.numel());
  }
}

namespace {

std::unique_ptr<Linear> linear(std::int64_t in, std::int64_t out, Rng& rng, bool bias = true) {
  auto l = std::make_unique<Linear>(in, out, bias);
  l->init_params(rng, "kaiming_uniform");
  return l;
}

}  // namespace

// The smallest |fc1 output| of the Sequential check below for `seed` (the same draws).
double fc1_min_abs(std::uint64_t seed) {
  Rng rng(seed);
  auto fc1 = linear(5, 7, rng);
  fc1->to_dtype(DType::f64);
  double out = 1e300;
  for (double v : values(fc1->forward(random_tensor({4, 5}, seed + 1), true))) out = std::min(out, std::abs(v));
  return out;
}

TEST_CASE("Sequential gradients match finite differences, fused Linear+activation included", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    for (bool gelu : {false, true}) {
      // A ReLU input within the difference step of the kink makes the numeric gradient
      // wrong, not the layer: such a draw is drawn again.
      auto seed = fresh_seed();
      while (!gelu && fc1_min_abs(seed) < 1e-4) seed += 7919;
      INFO("seed " << seed << (gelu ? ", gelu" : ", relu"));
      Rng rng(seed);
      Sequential seq;
      seq.add("fc1", linear(5, 7, rng));
      if (gelu) seq.add("act", std::make_unique<GELU>());
      else seq.add("act", std::make_unique<ReLU>());
      seq.add("fc2", linear(7, 3, rng));
      // The CPU backend has Op::linear_activation: the container fused the pair.
      auto& fc1 = dynamic_cast<Linear&>(*seq.children()[0].second);
      CHECK(fc1.fused_activation() == (gelu ? kernels::Activation::gelu : kernels::Activation::relu));
      CHECK(dynamic_cast<ActivationLayer&>(*seq.children()[1].second).passthrough());
      check_gradients(seq, random_tensor({4, 5}, seed + 1), seed, impl);
    }
  }
}

TEST_CASE("Residual gradients match finite differences (identity and projection shortcuts)", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    auto body = std::make_unique<Sequential>();
    body->add("fc1", linear(6, 6, rng));
    body->add("act", std::make_unique<GELU>());
    body->add("fc2", linear(6, 6, rng));
    Residual identity(std::move(body));
    CHECK(identity.output_shape({6}) == Shape{6});
    check_gradients(identity, random_tensor({3, 6}, seed + 1), seed, impl);

    auto body2 = std::make_unique<Sequential>();
    body2->add("fc", linear(6, 4, rng));
    Residual projected(std::move(body2), linear(6, 4, rng, /*bias=*/false));
    check_gradients(projected, random_tensor({3, 6}, seed + 2), seed, impl);
    std::vector<std::string> paths;
    for (auto& p : collect_params(projected)) paths.push_back(p.path);
    CHECK(paths == std::vector<std::string>{"body/fc/weight", "body/fc/bias", "shortcut/weight"});
  }
}

TEST_CASE("BatchNorm gradients match finite differences (1d and 2d, train and eval)", "[nn][gradcheck]") {
  struct Case {
    Shape x;
    std::int64_t channels;
  };
  const Case cases[] = {{{5, 3}, 3}, {{2, 4, 3, 5}, 4}, {{3, 2, 7}, 2}, {{2, 1, 1, 1}, 1}};
  for (Impl impl : kImpls)
    for (const auto& c : cases)
      for (bool training : {true, false}) {
        const auto seed = fresh_seed();
        INFO("seed " << seed);
        BatchNorm bn(c.channels);
        bn.to_dtype(DType::f64);
        // Non-trivial affine parameters and running statistics (eval mode reads them).
        auto set = [&](const std::string& name, double lo, double hi, std::uint64_t s) {
          for (auto& p : bn.params())
            if (p.name == name) *p.value = random_tensor({c.channels}, s, lo, hi);
          for (auto& b : bn.buffers())
            if (b.name == name) *b.value = random_tensor({c.channels}, s, lo, hi);
        };
        set("weight", 0.5, 1.5, seed + 3);
        set("bias", -1, 1, seed + 4);
        set("running_mean", -0.5, 0.5, seed + 5);
        set("running_var", 0.5, 2, seed + 6);
        check_gradients(bn, random_tensor(c.x, seed + 1), seed, impl, [] {}, training);
      }
}

TEST_CASE("LayerNorm gradients match finite differences", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    for (const Shape& x : {Shape{4, 7}, Shape{2, 3, 5}, Shape{3, 1}}) {
      LayerNorm ln(x.back());
      ln.to_dtype(DType::f64);
      for (auto& p : ln.params())
        *p.value = random_tensor({x.back()}, seed + (p.name == "weight" ? 3 : 4), p.name == "weight" ? 0.5 : -1, 1.5);
      check_gradients(ln, random_tensor(x, seed + 1), seed, impl);
    }
    CHECK_THROWS_WITH(LayerNorm(4).output_shape({3, 5}), Catch::Contains("layernorm: expected input [..., 4]"));
  }
}

TEST_CASE("GlobalAvgPool gradients match finite differences", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    GlobalAvgPool gap;
    CHECK(gap.output_shape({5, 3, 4}) == Shape{5});
    check_gradients(gap, random_tensor({2, 5, 3, 4}, seed + 1), seed, impl);
    check_gradients(gap, random_tensor({3, 2, 1, 1}, seed + 2), seed, impl);
    CHECK_THROWS_WITH(gap.output_shape({5}), Catch::Contains("expected input [C, H, W]"));
  }
}

// Channels-last maps (NHWC bytes behind the logical [B, C, H, W]): float64 runs the
// convolution permuted through NCHW, batch norm as [B*H*W, C] rows, the pooling per pixel.
TEST_CASE("channels-last Conv2d, BatchNorm and GlobalAvgPool gradients match finite differences",
          "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    Conv2d conv(3, 4, 3, 2, 1);
    conv.init_params(rng, "kaiming_uniform");
    conv.set_channels_last(true);
    check_gradients(conv, random_tensor({2, 3, 5, 6}, seed + 1), seed, impl);
    for (bool training : {true, false}) {
      BatchNorm bn(4);
      bn.to_dtype(DType::f64);
      bn.set_channels_last(true);
      for (auto& p : bn.params()) *p.value = random_tensor({4}, seed + (p.name == "weight" ? 3 : 4), 0.5, 1.5);
      for (auto& b : bn.buffers()) *b.value = random_tensor({4}, seed + 5, 0.5, 2);
      check_gradients(bn, random_tensor({2, 4, 3, 5}, seed + 2), seed, impl, [] {}, training);
    }
    GlobalAvgPool gap;
    gap.set_channels_last(true);
    check_gradients(gap, random_tensor({2, 5, 3, 4}, seed + 6), seed, impl);
  }
}

// The same layer on the same map stored NCHW and NHWC: the same values, permuted.
TEST_CASE("channels-last layers compute what their NCHW selves compute on the permuted map", "[nn]") {
  const std::int64_t B = 3, C = 4, H = 5, W = 6, S = H * W;
  auto permute = [&](const Tensor& nchw, std::int64_t channels, std::int64_t spatial) {
    Tensor out = Tensor::empty(nchw.shape(), DType::f64);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t i = 0; i < spatial; ++i)
          out.data<double>()[(b * spatial + i) * channels + c] = nchw.data<double>()[(b * channels + c) * spatial + i];
    return out;
  };
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed << (impl == Impl::reference ? " reference" : " fast"));
    const Tensor x = random_tensor({B, C, H, W}, seed);
    const Tensor xl = permute(x, C, S);
    Rng rng(seed);
    Conv2d a(C, 7, 3, 1, 1), b(C, 7, 3, 1, 1);
    a.init_params(rng, "kaiming_uniform");
    for (std::size_t i = 0; i < a.params().size(); ++i) *b.params()[i].value = a.params()[i].value->clone();
    a.to_dtype(DType::f64), b.to_dtype(DType::f64);
    b.set_channels_last(true);
    a.set_reference(impl == Impl::reference), b.set_reference(impl == Impl::reference);
    CHECK(max_rel_error(values(permute(a.forward(x, true), 7, S)), values(b.forward(xl, true))) < 1e-12);
    BatchNorm na(C), nb(C);
    na.to_dtype(DType::f64), nb.to_dtype(DType::f64);
    nb.set_channels_last(true);
    na.set_reference(impl == Impl::reference), nb.set_reference(impl == Impl::reference);
    // The two layouts sum a channel's statistics in different orders; in double that moves
    // an output by ~1e-15 absolute, up to ~1e-12 relative at the 1e-3 floor (seen under
    // clang -O1). A wrong permutation or statistic is off by far more than 1e-10.
    CHECK(max_rel_error(values(permute(na.forward(x, true), C, S)), values(nb.forward(xl, true))) < 1e-10);
    for (std::size_t i = 0; i < na.buffers().size(); ++i)
      CHECK(max_rel_error(values(*na.buffers()[i].value), values(*nb.buffers()[i].value)) < 1e-10);
    GlobalAvgPool ga, gb;
    gb.set_channels_last(true);
    CHECK(max_rel_error(values(ga.forward(x, true)), values(gb.forward(xl, true))) < 1e-12);
  }
}

TEST_CASE("Residual refuses a body and shortcut of different shapes", "[nn]") {
  Rng rng(1);
  auto body = std::make_unique<Sequential>();
  body->add("fc", linear(6, 4, rng));
  Residual bad(std::move(body));
  CHECK_THROWS_WITH(bad.output_shape({6}), Catch::Matchers::Contains("identity shortcut"));
}

// ---- the gpt layers (token rows [B*T, D]) ----

TEST_CASE("PositionEmbedding, CausalSelfAttention and the transformer block match finite differences",
          "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed);
    Rng rng(seed);
    PositionEmbedding pos(5, 3);
    pos.init_params(rng, "");
    check_gradients(pos, random_tensor({2 * 5, 3}, seed + 1), seed, impl);
    // T = 1 (one token attends to itself), T = 7 with head_dim 3 (not a multiple of 4).
    for (auto [T, D, H] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 4, 2}, {7, 6, 2}, {4, 8, 1}}) {
      INFO("T " << T << " D " << D << " heads " << H);
      for (AttentionKernel kernel : {AttentionKernel::materialized, AttentionKernel::flash}) {
        INFO((kernel == AttentionKernel::flash ? "flash" : "materialized"));
        CausalSelfAttention attn(D, H, T, 0.0, kernel);
        attn.qkv().init_params(rng, "kaiming_uniform");
        attn.proj().init_params(rng, "kaiming_uniform");
        check_gradients(attn, random_tensor({2 * T, D}, seed + 2, -2, 2), seed, impl);
      }
    }
    auto block = transformer_block({4, 2, 3, 2, 0.0});
    visit_modules(*block, [&](const std::string&, Module& m) { m.init_params(rng, "kaiming_uniform"); });
    check_gradients(*block, random_tensor({2 * 3, 4}, seed + 3), seed, impl);
  }
}

TEST_CASE("Embedding's weight gradient matches finite differences, bad ids throw", "[nn][gradcheck]") {
  for (Impl impl : kImpls) {
    const auto seed = fresh_seed();
    INFO("seed " << seed << ", impl " << (impl == Impl::fast ? "fast" : "reference"));
    Rng rng(seed);
    Embedding emb(6, 3, 4);
    emb.init_params(rng, "");
    emb.to_dtype(DType::f64);
    emb.set_reference(impl == Impl::reference);
    // Repeated ids (0 three times): their gradients must add up.
    const std::vector<std::int32_t> idv{0, 5, 0, 2, 1, 0, 3, 5};
    Tensor ids = Tensor::empty({2, 4}, DType::i32);
    std::memcpy(ids.raw(), idv.data(), idv.size() * sizeof(std::int32_t));
    Tensor y0 = emb.forward(ids, true);
    REQUIRE(y0.shape() == Shape{8, 3});
    Tensor r = random_tensor(y0.shape(), seed + 1);
    auto objective = [&] {
      Tensor y = emb.forward(ids, true);
      double s = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i) s += y.data<double>()[i] * r.data<double>()[i];
      return s;
    };
    auto params = collect_params(emb);
    params[0].grad->zero();
    emb.forward(ids, true);
    CHECK_FALSE(emb.backward(r, true).defined());  // ids have no gradient
    CHECK(max_rel_error(values(*params[0].grad), numeric_gradient(objective, pointers(*params[0].value))) < kTol);
    // Float input, a wrong T and an id out of range are refused, naming the problem.
    CHECK_THROWS_WITH(emb.forward(random_tensor({2, 4}, seed), true), Catch::Contains("int32"));
    CHECK_THROWS_AS(emb.forward(Tensor::zeros({2, 3}, DType::i32), true), std::invalid_argument);
    std::int32_t* p = ids.data<std::int32_t>();
    p[6] = 6;
    CHECK_THROWS_WITH(emb.forward(ids, true), Catch::Contains("row 6 has id 6"));
  }
}
