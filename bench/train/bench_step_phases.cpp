// Where the trainer's step spends its time, phase by phase (train/step.hpp's phases, timed
// by StepHooks::times), for an image config in one process:
//   bench_step_phases --config configs/fmnist_mlp.yaml [--threads 2] [--teachers 0]
//                     [--block 100] [--blocks 30] [--warmup 50] [--set key=value ...]
// Runs `blocks` blocks of `block` steps and prints, per block, the milliseconds per step of
// the whole step and of each phase. The summary gives each phase's median over the blocks,
// its share of the median step, and its mean in the slower half of the blocks minus its mean
// in the faster half: on a machine whose speed comes and goes (this project's 2-vCPU host,
// docs/results.md), that difference says which phases a slow spell stretches.
// On the CPU backend the phases are the work itself (every op returns when done); on a
// device queue they are the host's enqueue and wait times.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_args.hpp"
#include "bench/train/step_fixture.hpp"

using namespace codistill;
using codistill::bench::median;

namespace {

struct Args : bench::StepArgs {
  int teachers = 0;
  Args() { block = 100, blocks = 30, warmup = 50, min_blocks = 2; }  // two halves to compare
};

Args parse(int argc, char** argv) {
  Args a;
  bench::ArgReader r(argc, argv);
  while (r.next()) {
    if (a.read(r)) continue;
    if (r.key() == "--teachers") a.teachers = r.count(0);
    else
      throw std::invalid_argument("unknown argument " + r.key() + " (valid: " + Args::kValid + " --teachers)");
  }
  a.check();
  return a;
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

int run(const Args& a) {
  bench::StepFixture f(a.config, a.overrides, a.threads, a.teachers);
  const Config& c = f.config();
  f.steps(a.teachers, a.warmup);
  std::printf("bench_step_phases: %s, batch %lld, %d threads, %d teachers, prefetch %s; %d blocks of %d steps after %d "
              "warm-up steps (ms per step)\n",
              a.config.c_str(), static_cast<long long>(c.data.batch_size), c.run.threads, a.teachers,
              f.prefetch() ? "on" : "off", a.blocks, a.block, a.warmup);
  constexpr std::size_t P = StepTimes::count;
  std::printf("%-6s %8s", "block", "step");
  for (const char* n : StepTimes::names) std::printf(" %9.9s", n);
  std::printf(" %9s\n", "other");
  std::vector<double> total;                  // per block
  std::vector<std::vector<double>> phase(P);  // per phase, per block
  std::vector<double> other;                  // the step's time outside every phase (the loop, the clock)
  for (int b = 0; b < a.blocks; ++b) {
    StepTimes t;
    const auto t0 = std::chrono::steady_clock::now();
    f.steps(a.teachers, a.block, &t);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / a.block;
    total.push_back(ms);
    double sum = 0;
    std::printf("%-6d %8.4f", b + 1, ms);
    for (std::size_t p = 0; p < P; ++p) {
      const double v = t.seconds[p] * 1e3 / static_cast<double>(t.steps);
      phase[p].push_back(v);
      sum += v;
      std::printf(" %9.4f", v);
    }
    other.push_back(ms - sum);
    std::printf(" %9.4f\n", ms - sum);
  }

  // The slower and faster halves of the blocks by their step time (the middle block of an
  // odd count in neither).
  std::vector<std::size_t> order(total.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return total[x] < total[y]; });
  const std::size_t half = order.size() / 2;
  auto split = [&](const std::vector<double>& v) {
    std::vector<double> fast, slow;
    for (std::size_t i = 0; i < half; ++i) {
      fast.push_back(v[order[i]]);
      slow.push_back(v[order[order.size() - 1 - i]]);
    }
    return std::pair{mean(fast), mean(slow)};
  };
  const double med = median(total), best = *std::min_element(total.begin(), total.end());
  const auto [fast_total, slow_total] = split(total);
  std::printf("step: best %.4f ms (%.0f ex/s), median %.4f ms (%.0f ex/s); faster half %.4f, slower half %.4f "
              "(+%.4f)\n",
              best, c.data.batch_size * 1e3 / best, med, c.data.batch_size * 1e3 / med, fast_total, slow_total,
              slow_total - fast_total);
  std::printf("%-14s %9s %7s %9s %9s %9s\n", "phase", "median", "share", "fast", "slow", "slow-fast");
  std::string json = fmt::format(
      R"({{"bench":"step_phases","config":{},"threads":{},"teachers":{},"batch":{},"blocks":{},"block":{},)"
      R"("step_ms":{{"best":{:.5f},"median":{:.5f},"fast_half":{:.5f},"slow_half":{:.5f}}},"phases":[)",
      nlohmann::json(a.config).dump(), c.run.threads, a.teachers, c.data.batch_size, a.blocks, a.block, best, med,
      fast_total, slow_total);
  for (std::size_t p = 0; p <= P; ++p) {
    const auto& v = p < P ? phase[p] : other;
    const char* name = p < P ? StepTimes::names[p] : "other";
    const double m = median(v);
    const auto [fast, slow] = split(v);
    std::printf("%-14s %9.4f %6.1f%% %9.4f %9.4f %+9.4f\n", name, m, 100 * m / med, fast, slow, slow - fast);
    json += fmt::format(R"({}{{"phase":"{}","median_ms":{:.5f},"fast_half_ms":{:.5f},"slow_half_ms":{:.5f}}})",
                        p ? "," : "", name, m, fast, slow);
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step_phases: %s\n", e.what());
    return 1;
  }
}
