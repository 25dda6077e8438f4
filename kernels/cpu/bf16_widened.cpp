// The widened bf16 GEMM kernel (bf16_widened.hpp).
#include "kernels/cpu/bf16_widened.hpp"

#include <omp.h>

#include <algorithm>

#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/gemm.hpp"

namespace codistill::kernels::cpu::widened {
namespace {

void grow(std::vector<float>& v, std::int64_t n) {
  if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
}

// A panel is at most this many rows of w ([512, 768] floats: 1.5 MB, about an L2).
constexpr std::int64_t kPanelRows = 512;
// Below this many flops a panel loop stays on one thread (as gemm's kMinFlopsPerThread).
constexpr double kMinFlopsPerThread = 4e5;

struct Panels {
  int threads = 1;
  std::int64_t rows = 0, count = 0;
};

// A multiple of the thread count where N allows, so no thread idles through a last round
// (N = 768 on two threads: two panels of 384, not 512 + 256).
Panels plan_panels(std::int64_t M, std::int64_t N, std::int64_t K) {
  Panels p;
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  p.threads = omp_in_parallel() ? 1 : std::max(1, std::min(omp_get_max_threads(), static_cast<int>(flops / kMinFlopsPerThread)));
  const std::int64_t t = p.threads;
  const std::int64_t want = t * ((N + t * kPanelRows - 1) / (t * kPanelRows));
  p.rows = std::min(N, ((N + want - 1) / want + 15) / 16 * 16);
  p.count = (N + p.rows - 1) / p.rows;
  return p;
}

// One panel: rows [n0, n0 + nb) of w widened into `panel`, multiplied, then bias and relu on
// the panel's columns of y.
void run_panel(const float* xv, const float* w, const std::uint16_t* w_bits, const float* b, float* y, std::int64_t M,
               std::int64_t N, std::int64_t K, bool relu, std::int64_t n0, std::int64_t nb, float* panel) {
  if (w_bits)
    widen_bf16(w_bits + n0 * K, panel, nb * K);
  else
    round_values_to_bf16(w + n0 * K, panel, nb * K);
  gemm_serial<float>(false, true, M, nb, K, 1.0f, xv, K, panel, K, 0.0f, y + n0, N);
  if (!b && !relu) return;
  for (std::int64_t m = 0; m < M; ++m) {
    float* row = y + m * N + n0;
    if (b)
      for (std::int64_t j = 0; j < nb; ++j) row[j] += b[n0 + j];
    if (relu)
      for (std::int64_t j = 0; j < nb; ++j) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
  }
}

}  // namespace

void gemm(Workspace& ws, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
          const float* a_values, const float* B, bool accumulate, float* C) {
  if (!a_values) {
    grow(ws.a, M * K);
    round_values_to_bf16(a, ws.a.data(), M * K);
    a_values = ws.a.data();
  }
  grow(ws.b, K * N);
  round_values_to_bf16(B, ws.b.data(), K * N);
  cpu::gemm<float>(ta, tb, M, N, K, 1.0f, a_values, ws.b.data(), accumulate ? 1.0f : 0.0f, C, Impl::fast);
}

void linear_forward(Workspace& ws, const float* x, const float* w, const std::uint16_t* w_bits, bool frozen,
                    const float* b, float* y, std::int64_t M, std::int64_t N, std::int64_t K, bool relu) {
  if (frozen && !w_bits) {
    auto& bits = ws.frozen[{w, N, K}];
    if (bits.empty()) {
      bits.resize(static_cast<std::size_t>(N * K));
      round_to_bf16(w, bits.data(), N * K);
    }
    w_bits = bits.data();
  }
  grow(ws.a, M * K);
  round_values_to_bf16(x, ws.a.data(), M * K);
  const float* xv = ws.a.data();
  const Panels p = plan_panels(M, N, K);
  if (ws.panels.size() < static_cast<std::size_t>(p.threads)) ws.panels.resize(static_cast<std::size_t>(p.threads));
  for (int t = 0; t < p.threads; ++t) grow(ws.panels[static_cast<std::size_t>(t)], p.rows * K);
  // The widening inside a panel runs on its thread: round_values_to_bf16 and widen_bf16 see
  // omp_in_parallel() and stay serial.
#pragma omp parallel for schedule(static) num_threads(p.threads) if (p.threads > 1)
  for (std::int64_t i = 0; i < p.count; ++i) {
    const std::int64_t n0 = i * p.rows, nb = std::min(p.rows, N - n0);
    run_panel(xv, w, w_bits, b, y, M, N, K, relu, n0, nb, ws.panels[static_cast<std::size_t>(omp_get_thread_num())].data());
  }
}

}  // namespace codistill::kernels::cpu::widened
