// The fused bias + activation kernels, the channel bias and the dropout multiply against
// their CPU twins (kernels/cpu/activation.hpp, bias.hpp), on fresh random inputs with sizes
// that are not multiples of the block size, outputs poisoned first; shapes with several
// row/image chunks (the two-stage reductions); in-place variants; reproducibility.
// Without a CUDA device every case prints "skipped: no CUDA device".
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/bias.hpp"
#include "kernels/cuda/bias_activation.hpp"

namespace cpu = codistill::kernels::cpu;
namespace cuda = codistill::kernels::cuda;
using cuda::Activation;
using namespace codistill::test;

namespace {

const char* name(Activation a) {
  return a == Activation::relu ? "relu" : a == Activation::gelu ? "gelu" : "none";
}

// The CPU twin of activation_forward (reference implementations, in place allowed).
void act_forward(Activation a, const float* x, float* y, std::int64_t n) {
  if (a == Activation::relu) cpu::relu_forward(x, y, n, cpu::Impl::reference);
  else if (a == Activation::gelu) cpu::gelu_forward(x, y, n, cpu::Impl::reference);
  else std::copy(x, x + n, y);
}

// saved: y for relu, x for gelu.
void act_backward(Activation a, const float* saved, const float* dy, float* dx, std::int64_t n) {
  if (a == Activation::relu) cpu::relu_backward(saved, dy, dx, n, cpu::Impl::reference);
  else if (a == Activation::gelu) cpu::gelu_backward(saved, dy, dx, n, cpu::Impl::reference);
  else std::copy(dy, dy + n, dx);
}

}  // namespace

TEST_CASE("cuda activations match the CPU reference", "[cuda][bias_activation]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  for (std::int64_t n : {1, 1000, 100003})
    for (Activation a : {Activation::none, Activation::relu, Activation::gelu}) {
      INFO("n " << n << " " << name(a));
      const auto x = random_vector<float>(n, seed + n, -6, 6);
      const auto dy = random_vector<float>(n, seed + n + 1);
      std::vector<float> y_want(n), dx_want(n);
      act_forward(a, x.data(), y_want.data(), n);
      act_backward(a, a == Activation::relu ? y_want.data() : x.data(), dy.data(),
                   dx_want.data(), n);

      DeviceVec<float> dx_in(x), y(poisoned<float>(n)), ddy(dy), dx(poisoned<float>(n));
      cuda::activation_forward(dx_in.ptr, y.ptr, n, a, ctx);
      const float* saved = a == Activation::relu ? y.ptr : dx_in.ptr;
      cuda::activation_backward(saved, ddy.ptr, dx.ptr, n, a, ctx);
      stream.synchronize();
      CHECK(rel_error(y.host(), y_want) < 1e-5);
      CHECK(rel_error(dx.host(), dx_want) < tolerance<float>());

      cuda::activation_backward(saved, ddy.ptr, ddy.ptr, n, a, ctx);  // in place: dx = dy
      stream.synchronize();
      CHECK(rel_error(ddy.host(), dx_want) < tolerance<float>());
    }
}

TEST_CASE("cuda fused bias + activation matches bias_add_rows and the activation",
          "[cuda][bias_activation]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1}, {7, 33}, {600, 45}, {70000, 3}, {5, 1000}};
  for (auto [M, N] : shapes)
    for (Activation a : {Activation::none, Activation::relu, Activation::gelu})
      for (bool bias : {true, false}) {
        INFO("M " << M << " N " << N << " " << name(a) << " bias " << bias);
        const std::uint64_t s = seed + M * 7 + N;
        const auto y0 = random_vector<float>(M * N, s, -4, 4);
        const auto b = random_vector<float>(N, s + 1);
        const auto dy = random_vector<float>(M * N, s + 2);
        const auto db0 = random_vector<float>(N, s + 3);
        // CPU: pre = y0 + b, y = act(pre); dpre = dy * act'; db = column sums of dpre.
        std::vector<float> pre = y0, y_want(M * N), dpre_want(M * N);
        if (bias) cpu::bias_add_rows(pre.data(), b.data(), M, N, cpu::Impl::reference);
        act_forward(a, pre.data(), y_want.data(), M * N);
        act_backward(a, a == Activation::relu ? y_want.data() : pre.data(), dy.data(),
                     dpre_want.data(), M * N);

        DeviceVec<float> y(y0), db(b), dpre_dev(poisoned<float>(M * N));
        cuda::bias_activation_forward(y.ptr, bias ? db.ptr : nullptr, dpre_dev.ptr, M, N, a, ctx);
        stream.synchronize();
        CHECK(rel_error(y.host(), y_want) < 1e-5);
        if (a == Activation::gelu) CHECK(dpre_dev.host() == pre);  // pre stored for gelu
        else CHECK(all_nan(dpre_dev.host()));                       // and only for gelu
        const float* saved = a == Activation::relu ? y.ptr : dpre_dev.ptr;  // y or pre

        for (bool accumulate : {false, true}) {
          INFO("accumulate " << accumulate);
          std::vector<float> db_want = accumulate ? db0 : poisoned<float>(N);
          cpu::bias_grad_rows(dpre_want.data(), db_want.data(), M, N, accumulate,
                              cpu::Impl::reference);
          DeviceVec<float> ddy(dy), dpre(poisoned<float>(M * N));
          DeviceVec<float> grad(accumulate ? db0 : poisoned<float>(N));
          cuda::bias_activation_backward(ddy.ptr, saved, dpre.ptr, grad.ptr, M, N, a, accumulate,
                                         ctx);
          stream.synchronize();
          CHECK(rel_error(dpre.host(), dpre_want) < tolerance<float>());
          CHECK(rel_error(grad.host(), db_want) < tolerance<float>());
          // In place (dpre = dy) and without a bias gradient.
          cuda::bias_activation_backward(ddy.ptr, saved, ddy.ptr, nullptr, M, N, a, false, ctx);
          stream.synchronize();
          CHECK(rel_error(ddy.host(), dpre_want) < tolerance<float>());
        }
      }
}

TEST_CASE("cuda channel bias and its gradient match the CPU reference",
          "[cuda][bias_activation]") {
  if (no_cuda_device()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  struct S {
    std::int64_t B, C, S;
  };
  for (const S& s : {S{1, 1, 1}, S{3, 5, 7}, S{4000, 2, 5}, S{2, 17, 20000}, S{9, 64, 196}}) {
    INFO("B " << s.B << " C " << s.C << " S " << s.S);
    const std::int64_t n = s.B * s.C * s.S;
    const auto y0 = random_vector<float>(n, seed + n);
    const auto b = random_vector<float>(s.C, seed + n + 1);
    const auto db0 = random_vector<float>(s.C, seed + n + 2);
    std::vector<float> y_want = y0;
    cpu::bias_add_channels(y_want.data(), b.data(), s.B, s.C, s.S, cpu::Impl::reference);
    DeviceVec<float> y(y0), db(b);
    cuda::bias_add_channels(y.ptr, db.ptr, s.B, s.C, s.S, ctx);
    stream.synchronize();
    CHECK(y.host() == y_want);  // one float addition per element on both sides

    for (bool accumulate : {false, true}) {
      std::vector<float> want = accumulate ? db0 : poisoned<float>(s.C);
      cpu::bias_grad_channels(y0.data(), want.data(), s.B, s.C, s.S, accumulate,
                              cpu::Impl::reference);
      DeviceVec<float> dy(y0), grad(accumulate ? db0 : poisoned<float>(s.C));
      cuda::bias_grad_channels(dy.ptr, grad.ptr, s.B, s.C, s.S, accumulate, ctx);
      stream.synchronize();
      CHECK(rel_error(grad.host(), want) < 1e-5);  // double sums on both sides
    }
  }
}

TEST_CASE("cuda multiply applies a mask", "[cuda][bias_activation]") {
  if (no_cuda_device()) return;
  const std::int64_t n = 77777;
  const auto x = random_vector<float>(n, fresh_seed());
  auto mask = random_vector<float>(n, fresh_seed(), 0, 1);
  for (auto& m : mask) m = m < 0.3f ? 0.0f : 1.0f / 0.7f;
  std::vector<float> want(n);
  for (std::int64_t i = 0; i < n; ++i) want[i] = x[i] * mask[i];
  cuda::Stream stream(0);
  DeviceVec<float> dx(x), dm(mask), y(poisoned<float>(n));
  cuda::multiply(dx.ptr, dm.ptr, y.ptr, n, stream.context());
  stream.synchronize();
  CHECK(y.host() == want);
}

TEST_CASE("cuda bias gradients are reproducible", "[cuda][bias_activation]") {
  if (no_cuda_device()) return;
  const std::int64_t M = 100000, N = 77, B = 300, C = 3, S = 1000;
  const auto dy = random_vector<float>(M * N, fresh_seed());
  cuda::Stream stream(0);
  const auto ctx = stream.context();
  DeviceVec<float> d(dy), r1(poisoned<float>(N)), r2(poisoned<float>(N));
  cuda::bias_activation_backward(d.ptr, nullptr, nullptr, r1.ptr, M, N, Activation::none, false,
                                 ctx);
  cuda::bias_activation_backward(d.ptr, nullptr, nullptr, r2.ptr, M, N, Activation::none, false,
                                 ctx);
  DeviceVec<float> c1(poisoned<float>(C)), c2(poisoned<float>(C));
  cuda::bias_grad_channels(d.ptr, c1.ptr, B, C, S, false, ctx);
  cuda::bias_grad_channels(d.ptr, c2.ptr, B, C, S, false, ctx);
  stream.synchronize();
  CHECK(r1.host() == r2.host());
  CHECK(c1.host() == c2.host());
  CHECK(!all_nan(r1.host()));
}
