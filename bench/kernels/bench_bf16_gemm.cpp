// Which bf16 GEMM kernel is faster on this CPU (kernels/cpu/bf16.hpp, Bf16Kernel), and why.
//   bench_bf16_gemm [--threads N] [--rounds R] [--head-rows M]
// 1. Instruction peaks, per thread and on N threads at once: a loop of independent
//    vfmadd231ps zmm (float32 FMA, 32 flop each) against one of vdpbf16ps zmm (AVX512-BF16
//    dot product, 64 flop each). Skipped where the CPU lacks AVX-512 BF16.
// 2. The GEMMs of a GPT-2 124M step at B = 1, T = 1024 (a linear forward x w^T with bias
//    through Bf16Gemm::linear_forward, the two backward products through Bf16Gemm::gemm),
//    run by the onednn kernel, the widened kernel and the float32 gemm in turn, R rounds
//    alternating; GFLOP/s best and median per contender.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/isa.hpp"

namespace cpu = codistill::kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;
constexpr long kPeakIters = 20'000'000;

// 12 accumulators: more than latency x ports of either instruction on current cores.
__attribute__((target("avx512f"))) double fma_loop() {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 x = _mm512_set1_ps(1e-9f), y = _mm512_set1_ps(1.0f);
  for (long i = 0; i < kPeakIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(x, y, acc[j]);
  alignas(64) float lanes[16];
  float s = 0;
  for (auto& a : acc) {
    _mm512_store_ps(lanes, a);
    s += lanes[0];
  }
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop() {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x0001);
  for (long i = 0; i < kPeakIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, y);
  alignas(64) float lanes[16];
  float s = 0;
  for (auto& a : acc) {
    _mm512_store_ps(lanes, a);
    s += lanes[0];
  }
  return s;
}

// GFLOP/s per thread of `loop` (flop per instruction given), run on `threads` at once.
double peak(const std::function<double()>& loop, double flop_per_instr, int threads) {
  double sink = 0, best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += loop();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, kPeakIters * 12.0 * flop_per_instr / s / 1e9);
  }
  if (sink == 12345.678) std::puts("");  // keeps the loops
  return best;
}

struct Shape {
  const char* name;
  std::int64_t M, N, K;  // y[M, N] = x[M, K] w[N, K]^T
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// One forward + both backward products of `s`, by a contender; seconds.
using Step = std::function<void(const Shape&, const float*, const float*, const float*, const float*, float*, float*, float*)>;

double time_step(const Step& step, const Shape& s, std::vector<float>& x, std::vector<float>& w,
                 std::vector<float>& b, std::vector<float>& dy, std::vector<float>& y, std::vector<float>& dx,
                 std::vector<float>& dw) {
  const auto t0 = Clock::now();
  step(s, x.data(), w.data(), b.data(), dy.data(), y.data(), dx.data(), dw.data());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), rounds = 3;
  std::int64_t head_rows = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--head-rows") head_rows = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_bf16_gemm: unknown option %s (--threads, --rounds, --head-rows)\n", a.c_str());
      return 2;
    }
  }
  if (threads < 1 || rounds < 1 || head_rows < 1) {
    std::fprintf(stderr, "bench_bf16_gemm: --threads, --rounds and --head-rows must be >= 1\n");
    return 2;
  }
  omp_set_num_threads(threads);
  __builtin_cpu_init();
  std::printf("# bench_bf16_gemm: threads %d, rounds %d, default kernel %s, AMX-BF16 %s\n", threads, rounds,
              cpu::bf16_kernel_name(cpu::default_bf16_kernel()), cpu::has_amx_bf16() ? "yes" : "no");
  if (__builtin_cpu_supports("avx512f")) {
    std::printf("peak GFLOP/s per thread, 1 thread: vfmadd231ps %.1f", peak(fma_loop, 32, 1));
    if (__builtin_cpu_supports("avx512bf16")) std::printf("  vdpbf16ps %.1f", peak(dpbf16_loop, 64, 1));
    std::printf("\npeak GFLOP/s per thread, %d threads: vfmadd231ps %.1f", threads, peak(fma_loop, 32, threads));
    if (__builtin_cpu_supports("avx512bf16")) std::printf("  vdpbf16ps %.1f", peak(dpbf16_loop, 64, threads));
    std::printf("\n");
  }
  cpu::Bf16Gemm onednn(cpu::Bf16Kernel::onednn), widened(cpu::Bf16Kernel::widened);
  auto engine_step = [](cpu::Bf16Gemm& e) -> Step {
    return [&e](const Shape& s, const float* x, const float* w, const float* b, const float* dy, float* y, float* dx,
                float* dw) {
      e.linear_forward(x, w, b, y, s.M, s.N, s.K, false, false);
      const cpu::Bf16Operand g = e.round_operand(dy, s.M * s.N);
      e.gemm(false, false, s.M, s.K, s.N, g, w, false, dx);
      e.gemm(true, false, s.N, s.K, s.M, g, x, false, dw);
    };
  };
  const Step f32 = [](const Shape& s, const float* x, const float* w, const float*, const float* dy, float* y,
                      float* dx, float* dw) {
    cpu::gemm<float>(false, true, s.M, s.N, s.K, 1.0f, x, w, 0.0f, y);
    cpu::gemm<float>(false, false, s.M, s.K, s.N, 1.0f, dy, w, 0.0f, dx);
    cpu::gemm<float>(true, false, s.N, s.K, s.M, 1.0f, dy, x, 0.0f, dw);
  };
  const std::vector<std::pair<const char*, Step>> contenders{
      {"onednn", engine_step(onednn)}, {"widened", engine_step(widened)}, {"float32", f32}};
  const Shape shapes[] = {{"qkv", 1024, 2304, 768},
                          {"attn_proj", 1024, 768, 768},
                          {"fc1", 1024, 3072, 768},
                          {"fc2", 1024, 768, 3072},
                          {"head", head_rows, 50304, 768}};
  std::printf("%-10s %-9s %12s %12s   (GFLOP/s of forward + 2 backward products)\n", "gemm", "kernel", "best",
              "median");
  for (const Shape& s : shapes) {
    auto x = random_floats(static_cast<std::size_t>(s.M * s.K), 1), w = random_floats(static_cast<std::size_t>(s.N * s.K), 2);
    auto b = random_floats(static_cast<std::size_t>(s.N), 3), dy = random_floats(static_cast<std::size_t>(s.M * s.N), 4);
    std::vector<float> y(static_cast<std::size_t>(s.M * s.N)), dx(x.size()), dw(w.size());
    std::vector<std::vector<double>> secs(contenders.size());
    for (std::size_t c = 0; c < contenders.size(); ++c) time_step(contenders[c].second, s, x, w, b, dy, y, dx, dw);  // warm-up
    for (int r = 0; r < rounds; ++r)
      for (std::size_t c = 0; c < contenders.size(); ++c)
        secs[c].push_back(time_step(contenders[c].second, s, x, w, b, dy, y, dx, dw));
    const double flops = 6.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    for (std::size_t c = 0; c < contenders.size(); ++c)
      std::printf("%-10s %-9s %12.1f %12.1f\n", s.name, contenders[c].first,
                  flops / *std::min_element(secs[c].begin(), secs[c].end()) / 1e9, flops / median(secs[c]) / 1e9);
  }
  return 0;
}
