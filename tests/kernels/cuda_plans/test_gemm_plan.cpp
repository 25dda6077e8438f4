// The cuBLAS call plans of the linear layer (kernels/cuda/plans/gemm_plan.hpp), executed by
// OpenBLAS in column-major mode exactly as linear.cu passes them to cublasGemmEx, against
// the row-major products they stand for (naive loops in double); the bf16-weight forward's
// against the CPU backend's.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/plans/gemm_plan.hpp"
#include "kernels/dtype.hpp"

namespace {

using namespace codistill::kernels::cuda;

struct Buffers {
  std::vector<float> x, w, y, dy, dx, dw;
  std::vector<float>& of(plans::Operand o) {
    switch (o) {
      case plans::Operand::x: return x;
      case plans::Operand::w: return w;
      case plans::Operand::y: return y;
      case plans::Operand::dy: return dy;
      case plans::Operand::dx: return dx;
      default: return dw;
    }
  }
};

std::vector<float> random(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

CBLAS_TRANSPOSE blas(plans::Trans t) { return t == plans::Trans::transpose ? CblasTrans : CblasNoTrans; }

// What cuBLAS would compute for the plan, computed by OpenBLAS (column-major).
void execute(const plans::GemmPlan& p, Buffers& b) {
  cblas_sgemm(CblasColMajor, blas(p.transa), blas(p.transb), static_cast<int>(p.m),
              static_cast<int>(p.n), static_cast<int>(p.k), p.alpha, b.of(p.a).data(),
              static_cast<int>(p.lda), b.of(p.b).data(), static_cast<int>(p.ldb), p.beta,
              b.of(p.c).data(), static_cast<int>(p.ldc));
}

void require_close(const std::vector<float>& got, const std::vector<double>& want, int terms) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    REQUIRE(got[i] == Approx(want[i]).margin(1e-5 * terms).epsilon(1e-5));
}

}  // namespace

TEST_CASE("cuBLAS plans of the linear layer compute the row-major products", "[plans]") {
  const std::int64_t sizes[][3] = {{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {4, 6, 1}, {13, 7, 29},
                                   {64, 10, 784}, {33, 65, 17}};
  std::uint64_t seed = 1;
  for (const auto& s : sizes) {
    const std::int64_t M = s[0], N = s[1], K = s[2];
    INFO("M=" << M << " N=" << N << " K=" << K);
    Buffers b;
    b.x = random(M * K, seed++), b.w = random(N * K, seed++), b.dy = random(M * N, seed++);
    b.y.assign(M * N, 7.0f), b.dx.assign(M * K, 7.0f);  // beta = 0 must ignore these
    const auto dw0 = random(N * K, seed++);

    // y[m, n] = sum_k x[m, k] w[n, k]
    execute(plans::linear_forward(M, N, K), b);
    std::vector<double> want(M * N, 0.0);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k) want[m * N + n] += double(b.x[m * K + k]) * b.w[n * K + k];
    require_close(b.y, want, static_cast<int>(K));

    // dx[m, k] = sum_n dy[m, n] w[n, k]
    execute(plans::linear_backward_input(M, N, K), b);
    want.assign(M * K, 0.0);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t k = 0; k < K; ++k)
        for (std::int64_t n = 0; n < N; ++n) want[m * K + k] += double(b.dy[m * N + n]) * b.w[n * K + k];
    require_close(b.dx, want, static_cast<int>(N));

    // dw[n, k] (+)= sum_m dy[m, n] x[m, k]
    for (const bool accumulate : {false, true}) {
      b.dw = accumulate ? dw0 : std::vector<float>(N * K, 7.0f);
      execute(plans::linear_backward_weight(M, N, K, accumulate), b);
      want.assign(N * K, 0.0);
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k) {
          double acc = accumulate ? dw0[n * K + k] : 0.0;
          for (std::int64_t m = 0; m < M; ++m) acc += double(b.dy[m * N + n]) * b.x[m * K + k];
          want[n * K + k] = acc;
        }
      require_close(b.dw, want, static_cast<int>(M));
    }
  }
}

TEST_CASE("cuBLAS plans respect cuBLAS's leading-dimension rules", "[plans]") {
  // lda >= rows of op(A) as stored, ldb likewise, ldc >= m: what cublasGemmEx checks.
  for (const auto& p : {plans::linear_forward(3, 5, 7), plans::linear_backward_input(3, 5, 7),
                        plans::linear_backward_weight(3, 5, 7, true)}) {
    const std::int64_t a_rows = p.transa == plans::Trans::none ? p.m : p.k;
    const std::int64_t b_rows = p.transb == plans::Trans::none ? p.k : p.n;
    CHECK(p.lda >= a_rows);
    CHECK(p.ldb >= b_rows);
    CHECK(p.ldc >= p.m);
  }
}

TEST_CASE("bf16 plans: the operand spans cuBLAS reads are the operands, and rounded they give the bf16 product",
          "[plans][bf16]") {
  // linear.cu's bf16 path rounds a_span(p) elements of A and b_span(p) of B, then runs the
  // unchanged plan on them: each span must be its operand's whole tensor, no more (a read past
  // it) and no less (unrounded garbage in the product).
  const std::int64_t sizes[][3] = {{1, 1, 1}, {13, 7, 29}, {64, 10, 784}, {33, 65, 17}};
  std::uint64_t seed = 100;
  for (const auto& s : sizes) {
    const std::int64_t M = s[0], N = s[1], K = s[2];
    INFO("M=" << M << " N=" << N << " K=" << K);
    auto numel = [&](plans::Operand o) {
      switch (o) {
        case plans::Operand::x: case plans::Operand::dx: return M * K;
        case plans::Operand::w: case plans::Operand::dw: return N * K;
        default: return M * N;
      }
    };
    for (const auto& p : {plans::linear_forward(M, N, K), plans::linear_backward_input(M, N, K),
                          plans::linear_backward_weight(M, N, K, true)}) {
      CHECK(plans::a_span(p) == numel(p.a));
      CHECK(plans::b_span(p) == numel(p.b));
    }
    // The forward on bf16-rounded spans (the CPU's rule) against the double product of the
    // rounded values: only float32 summation order apart.
    auto bf16 = [](float f) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      std::memcpy(&f, &u, 4);
      return f;
    };
    Buffers b;
    b.x = random(M * K, seed++), b.w = random(N * K, seed++);
    b.y.assign(M * N, 7.0f);
    const auto plan = plans::linear_forward(M, N, K);
    for (std::int64_t i = 0; i < plans::a_span(plan); ++i) b.of(plan.a)[i] = bf16(b.of(plan.a)[i]);
    for (std::int64_t i = 0; i < plans::b_span(plan); ++i) b.of(plan.b)[i] = bf16(b.of(plan.b)[i]);
    execute(plan, b);
    std::vector<double> want(M * N, 0.0);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k) want[m * N + n] += double(b.x[m * K + k]) * b.w[n * K + k];
    require_close(b.y, want, static_cast<int>(K));
    for (float v : b.x) REQUIRE(v == bf16(v));  // every element of x was rounded
    for (float v : b.w) REQUIRE(v == bf16(v));
  }
}

TEST_CASE("bf16-weight plan: A is the weight as stored, B x rounded, and it gives the CPU backend's product",
          "[plans][bf16]") {
  // linear.cu's bf16-weight path (Op::linear_bf16_weights) hands cuBLAS the bf16 weight in
  // place as A and rounds b_span(p) elements of x into scratch as B: the roles must be those
  // and the spans exactly the two tensors.
  const std::int64_t sizes[][3] = {{1, 1, 1}, {13, 7, 29}, {64, 10, 784}, {33, 65, 17}};
  std::uint64_t seed = 200;
  namespace k = codistill::kernels;
  for (const auto& s : sizes) {
    const std::int64_t M = s[0], N = s[1], K = s[2];
    INFO("M=" << M << " N=" << N << " K=" << K);
    const auto p = plans::linear_forward_bf16_weights(M, N, K);
    REQUIRE(p.a == plans::Operand::w);
    REQUIRE(p.b == plans::Operand::x);
    REQUIRE(p.c == plans::Operand::y);
    CHECK(plans::a_span(p) == N * K);
    CHECK(plans::b_span(p) == M * K);
    // The plan on the values cuBLAS reads (w widened from its bits, x rounded by the CPU's
    // rule) against the CPU backend's bf16-weight linear on a bf16-compute reference queue.
    Buffers b;
    b.x = random(M * K, seed++);
    std::vector<std::uint16_t> wbits(static_cast<std::size_t>(N * K));
    const auto wv = random(N * K, seed++);
    for (std::size_t i = 0; i < wbits.size(); ++i) wbits[i] = k::bf16_round(wv[i]);
    k::Tensor x = k::Tensor::empty({M, K}, k::DType::f32), w = k::Tensor::empty({N, K}, k::DType::bf16);
    k::Tensor y = k::Tensor::empty({M, N}, k::DType::f32);
    std::memcpy(x.raw(), b.x.data(), x.nbytes());
    std::memcpy(w.raw(), wbits.data(), w.nbytes());
    const auto q = k::backend_for(k::DeviceKind::cpu)
                       .make_queue(k::Device::cpu(), {.reference = true, .compute = k::Compute::bf16});
    k::backend_for(k::DeviceKind::cpu).linear_forward(x, w, nullptr, y, k::Activation::none, nullptr, *q);
    q->synchronize();
    b.w.resize(wbits.size());
    for (std::size_t i = 0; i < wbits.size(); ++i) b.w[i] = k::bf16_to_float(wbits[i]);
    for (std::int64_t i = 0; i < plans::b_span(p); ++i) b.x[i] = k::bf16_to_float(k::bf16_round(b.x[i]));
    b.y.assign(M * N, 7.0f);
    execute(p, b);
    std::vector<double> want(y.data<float>(), y.data<float>() + M * N);
    require_close(b.y, want, static_cast<int>(K));
  }
}
