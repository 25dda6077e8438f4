// The training step of an image config with K = 0, 1, 2... teachers, in one process, for the
// codistillation overhead per teacher (issue target: <= 0.34 of the no-teacher step):
//   bench_teacher_step --config configs/fmnist_mlp.yaml [--threads 2] [--ks 0,1,2]
//                      [--block 50] [--blocks 15] [--warmup 30] [--teacher-precision same|float32|bf16]
//                      [--set key=value ...]
// bench/run_teacher_overhead.sh measures the same through whole trainer runs, one process per
// K; on a shared, noisy machine those runs differ by more than a teacher costs. Here the K
// values take turns block by block (`block` steps each, `blocks` rounds) inside one process:
// the same data in memory, the same pages, the same student (it keeps training across the
// blocks; the cost of a step does not depend on the weights' values), so that a spell of load
// from elsewhere hits every K alike. The step is the trainer's own (train/step.hpp: batch
// gather, teacher forwards, student forward, fused loss, backward, optimizer update); the
// teachers are models of the config's architecture on their own queues with the teachers'
// precision and QueueOptions::frozen_params, as TeacherPool makes them (their weights are
// freshly initialized: a forward's cost does not depend on them).
// Prints a line per block and a JSON summary: per K the best and median ms per step over the
// blocks, and the overhead per teacher (step_K / step_0 - 1) / K from the bests and medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_args.hpp"
#include "bench/train/step_fixture.hpp"

using namespace codistill;
using codistill::bench::median;

namespace {

struct Args : bench::StepArgs {
  std::vector<int> ks{0, 1, 2};
  Args() { block = 50, blocks = 15, warmup = 30; }
};

Args parse(int argc, char** argv) {
  Args a;
  bench::ArgReader r(argc, argv);
  while (r.next()) {
    if (a.read(r)) continue;
    const std::string& k = r.key();
    if (k == "--teacher-precision") a.overrides.push_back("codistill.teacher_precision=" + r.value());
    else if (k == "--ks") {
      a.ks.clear();
      std::stringstream ss(r.value());
      for (std::string t; std::getline(ss, t, ',');) a.ks.push_back(std::stoi(t));
    } else {
      throw std::invalid_argument("unknown argument " + k + " (valid: " + Args::kValid + " --teacher-precision --ks)");
    }
  }
  a.check();
  if (a.ks.empty() || a.ks.front() != 0 || std::any_of(a.ks.begin(), a.ks.end(), [](int k) { return k < 0; }))
    throw std::invalid_argument("--ks: non-negative teacher counts starting with 0 (the baseline)");
  return a;
}

int run(const Args& a) {
  bench::StepFixture f(a.config, a.overrides, a.threads, *std::max_element(a.ks.begin(), a.ks.end()));
  const Config& c = f.config();
  for (int k : a.ks) f.steps(k, a.warmup);

  std::printf("bench_teacher_step: %s, batch %lld, %d threads, teacher precision %s, prefetch %s; K in {", a.config.c_str(),
              static_cast<long long>(c.data.batch_size), c.run.threads,
              kernels::compute_name(teacher_compute(c)), f.prefetch() ? "on" : "off");
  for (int k : a.ks) std::printf(" %d", k);
  std::printf(" }, %d blocks of %d steps after %d warm-up steps each\n", a.blocks, a.block, a.warmup);
  std::vector<std::vector<double>> ms(a.ks.size());
  for (int b = 0; b < a.blocks; ++b) {
    std::printf("block %d:", b + 1);
    for (std::size_t i = 0; i < a.ks.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f.steps(a.ks[i], a.block);
      const double per = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / a.block;
      ms[i].push_back(per);
      std::printf("  K=%d %.4f ms", a.ks[i], per);
    }
    std::printf("\n");
  }
  const double best0 = *std::min_element(ms[0].begin(), ms[0].end()), med0 = median(ms[0]);
  std::string json = fmt::format(R"({{"bench":"teacher_step","config":"{}","threads":{},"batch":{},"teacher_precision":"{}","blocks":{},"block":{},"results":[)",
                                 a.config, c.run.threads, c.data.batch_size,
                                 kernels::compute_name(teacher_compute(c)), a.blocks, a.block);
  for (std::size_t i = 0; i < a.ks.size(); ++i) {
    const int k = a.ks[i];
    const double best = *std::min_element(ms[i].begin(), ms[i].end()), med = median(ms[i]);
    const double ob = k ? (best / best0 - 1) / k : 0, om = k ? (med / med0 - 1) / k : 0;
    std::printf("K=%d  best %.4f ms (%.0f ex/s)  median %.4f ms", k, best, c.data.batch_size * 1e3 / best, med);
    if (k) std::printf("  per teacher %.3f (median %.3f)", ob, om);
    std::printf("\n");
    json += fmt::format(R"({}{{"k":{},"best_ms":{:.5f},"median_ms":{:.5f},"per_teacher_best":{:.4f},"per_teacher_median":{:.4f}}})",
                        i ? "," : "", k, best, med, ob, om);
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_teacher_step: %s\n", e.what());
    return 1;
  }
}
