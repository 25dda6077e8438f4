// The sgemm ceiling for compute-bound CPU work: float32 GEMM throughput (GFLOP/s) at a
// given thread count, on large squares and on the GEMMs of one fmnist_mlp training step.
// bench/run_train_bench.sh runs it every round and reports the MLP's GFLOP/s against it.
//   bench_sgemm [--threads N] [--min-ms MS] [--repeats R] [--json PATH]
// Five ways of running each GEMM:
//   openblas_mt  one cblas_sgemm call, OpenBLAS's own N threads (its usual use);
//   onednn_mt    one dnnl_sgemm call, oneDNN's own N OpenMP threads;
//   omp_split    the project's kernels::cpu::gemm (fast): C split into N blocks across
//                OpenMP threads, one serial oneDNN sgemm per block (kernels/cpu/gemm.cpp);
//   one_thread   one cblas_sgemm call on one thread (OpenBLAS);
//   onednn_1t    one dnnl_sgemm call on one thread.
// Debian 12's OpenBLAS 0.3.21 runs its AVX2 kernels on this Zen 4 (no Zen 4 support yet),
// oneDNN its AVX-512 ones: the two libraries differ about 2x here, hence both.
// A measurement: calls are repeated until one batch lasts MIN-MS, then R batches are timed;
// the best batch gives the GFLOP/s (2*M*N*K per call). "peak" is the best square result
// over openblas_mt and omp_split. The "mlp step" row times the 8 GEMMs of one training
// step of the 784-256-256-10 MLP at batch 128 (forward x*w^T, backward dy^T*x and dy*w, no
// dx for the first layer: 1.21 MFLOP per example), in the order and orientation that
// kernels/cpu/linear.cpp issues them, as one unit.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/impl.hpp"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);
extern "C" int openblas_get_parallel(void);

namespace cpu = codistill::kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;

struct Gemm {
  bool ta, tb;
  int M, N, K;
  double flops() const { return 2.0 * M * N * K; }
};

struct Buffers {
  std::vector<float> a, b, c;
};

Buffers make_buffers(const Gemm& g, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Buffers buf;
  buf.a.resize(static_cast<std::size_t>(g.M) * g.K);
  buf.b.resize(static_cast<std::size_t>(g.K) * g.N);
  buf.c.assign(static_cast<std::size_t>(g.M) * g.N, 0.0f);
  for (auto& x : buf.a) x = u(gen);
  for (auto& x : buf.b) x = u(gen);
  return buf;
}

enum class Way { openblas_mt, onednn_mt, omp_split, one_thread, onednn_1t };
const char* way_name(Way w) {
  switch (w) {
    case Way::openblas_mt: return "openblas_mt";
    case Way::onednn_mt: return "onednn_mt";
    case Way::omp_split: return "omp_split";
    case Way::one_thread: return "one_thread";
    case Way::onednn_1t: return "onednn_1t";
  }
  return "?";
}
bool multi_threaded(Way w) { return w == Way::openblas_mt || w == Way::onednn_mt || w == Way::omp_split; }

// Sets up the thread counts of one way (each way leaves OpenBLAS as it needs it).
void prepare(Way w, int threads) {
  cpu::set_num_threads(multi_threaded(w) ? threads : 1);  // OpenMP threads, OpenBLAS pinned to 1
  if (w == Way::openblas_mt) openblas_set_num_threads(threads);
}

void run(Way w, const Gemm& g, Buffers& buf) {
  if (w == Way::omp_split) {
    cpu::gemm<float>(g.ta, g.tb, g.M, g.N, g.K, 1.0f, buf.a.data(), buf.b.data(), 0.0f,
                     buf.c.data(), cpu::Impl::fast);
    return;
  }
  if (w == Way::onednn_mt || w == Way::onednn_1t) {
    if (dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.M, g.N, g.K, 1.0f, buf.a.data(), g.ta ? g.M : g.K,
                   buf.b.data(), g.tb ? g.K : g.N, 0.0f, buf.c.data(), g.N) != dnnl_success)
      throw std::runtime_error("dnnl_sgemm failed");
    return;
  }
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              g.M, g.N, g.K, 1.0f, buf.a.data(), g.ta ? g.M : g.K, buf.b.data(),
              g.tb ? g.K : g.N, 0.0f, buf.c.data(), g.N);
}

// Best seconds per call of `body` (see the header).
double best_seconds(const std::function<void()>& body, double min_ms, int repeats) {
  body();  // warm-up: thread pools started, pages touched
  long calls = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) body();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ms >= min_ms || calls > (1L << 24)) break;
    calls = ms <= 0 ? calls * 16 : std::max(calls * 2, static_cast<long>(calls * min_ms / ms * 1.2));
  }
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) body();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / calls);
  }
  return best;
}

int int_arg(const char* v, const char* name) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || x < 1)
    throw std::invalid_argument(std::string(name) + " needs a positive integer");
  return static_cast<int>(x);
}

struct Options {
  int threads = 2, repeats = 5, min_ms = 50;
  std::string json_path;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") o.threads = int_arg(next(), "--threads");
    else if (a == "--repeats") o.repeats = int_arg(next(), "--repeats");
    else if (a == "--min-ms") o.min_ms = int_arg(next(), "--min-ms");
    else if (a == "--json") o.json_path = next();
    else throw std::invalid_argument("unknown argument " + a);
  }
  return o;
}

constexpr int kBatch = 128;

// The squares, then the 8 GEMMs of one MLP training step from index 2 on.
std::vector<std::pair<std::string, Gemm>> gemms() {
  const int B = kBatch;
  return {
      {"square 1024", {false, false, 1024, 1024, 1024}},
      {"square 2048", {false, false, 2048, 2048, 2048}},
      {"mlp fwd 1", {false, true, B, 256, 784}},    // x[128,784] * w[256,784]^T
      {"mlp fwd 2", {false, true, B, 256, 256}},
      {"mlp fwd 3", {false, true, B, 10, 256}},
      {"mlp dw 3", {true, false, 10, 256, B}},      // dy[128,10]^T * x[128,256]
      {"mlp dx 3", {false, false, B, 256, 10}},     // dy[128,10] * w[10,256]
      {"mlp dw 2", {true, false, 256, 256, B}},
      {"mlp dx 2", {false, false, B, 256, 256}},
      {"mlp dw 1", {true, false, 256, 784, B}},     // dy[128,256]^T * x[128,784]
  };
}
constexpr std::size_t kFirstMlp = 2;

const std::vector<Way> kWays = {Way::openblas_mt, Way::onednn_mt, Way::omp_split, Way::one_thread, Way::onednn_1t};

// The per-GEMM table: one printed row (and one JSON row) per GEMM, GFLOP/s of each way.
struct SingleResults {
  nlohmann::json rows = nlohmann::json::array();
  double peak = 0;  // best square result over the multi-threaded ways
  std::string peak_how;
};

SingleResults time_singles(const std::vector<std::pair<std::string, Gemm>>& singles, std::vector<Buffers>& bufs,
                           const Options& o) {
  SingleResults res;
  for (std::size_t i = 0; i < singles.size(); ++i) {
    const auto& [name, g] = singles[i];
    nlohmann::json gf;
    std::printf("%-12s %5d %5d %5d %2d %2d", name.c_str(), g.M, g.N, g.K, g.ta, g.tb);
    for (Way w : kWays) {
      prepare(w, o.threads);
      const double s = best_seconds([&] { run(w, g, bufs[i]); }, o.min_ms, o.repeats);
      const double v = g.flops() / s / 1e9;
      gf[way_name(w)] = v;
      std::printf(" %12.1f", v);
      if (name.rfind("square", 0) == 0 && multi_threaded(w) && v > res.peak) {
        res.peak = v;
        res.peak_how = name + " " + way_name(w);
      }
    }
    std::printf("\n");
    res.rows.push_back({{"name", name}, {"M", g.M}, {"N", g.N}, {"K", g.K}, {"trans_a", g.ta},
                        {"trans_b", g.tb}, {"gflops", gf}});
  }
  return res;
}

// The "mlp step" row: the step's GEMMs timed as one unit, per way.
struct StepResults {
  double flops = 0, best = 0;  // best: over the multi-threaded ways
  nlohmann::json gflops;
};

StepResults time_mlp_step(const std::vector<std::pair<std::string, Gemm>>& singles, std::vector<Buffers>& bufs,
                          const Options& o) {
  StepResults res;
  for (std::size_t i = kFirstMlp; i < singles.size(); ++i) res.flops += singles[i].second.flops();
  std::printf("%-12s %29s", "mlp step", "(the 8 GEMMs above)");
  for (Way w : kWays) {
    prepare(w, o.threads);
    const double s = best_seconds(
        [&] {
          for (std::size_t i = kFirstMlp; i < singles.size(); ++i) run(w, singles[i].second, bufs[i]);
        },
        o.min_ms, o.repeats);
    res.gflops[way_name(w)] = res.flops / s / 1e9;
    if (multi_threaded(w)) res.best = std::max(res.best, res.flops / s / 1e9);
    std::printf(" %12.1f", res.flops / s / 1e9);
  }
  return res;
}

void write_json(const Options& o, int parallel, const SingleResults& singles, const StepResults& step,
                double per_example) {
  const nlohmann::json doc = {
      {"benchmark", "sgemm_cpu"}, {"threads", o.threads}, {"openblas", openblas_get_config()},
      {"openblas_threading", parallel}, {"repeats", o.repeats}, {"min_ms", o.min_ms},
      {"results", singles.rows},
      {"mlp_step", {{"flops_per_example", per_example}, {"batch", kBatch}, {"gflops", step.gflops},
                    {"best_gflops", step.best}}},
      {"peak_gflops", singles.peak}, {"peak_how", singles.peak_how}};
  std::ofstream f(o.json_path);
  f << doc.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write " + o.json_path);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  const auto singles = gemms();
  std::mt19937 gen(42);
  std::vector<Buffers> bufs;
  for (const auto& s : singles) bufs.push_back(make_buffers(s.second, gen));

  const int parallel = openblas_get_parallel();
  std::printf("sgemm, %d threads; OpenBLAS %s (threading: %s); best of %d batches of >= %d ms\n",
              o.threads, openblas_get_config(),
              parallel == 0 ? "sequential" : parallel == 1 ? "pthreads" : "OpenMP", o.repeats,
              o.min_ms);
  std::printf("%-12s %5s %5s %5s %2s %2s", "gemm", "M", "N", "K", "tA", "tB");
  for (Way w : kWays) std::printf(" %12s", way_name(w));
  std::printf("\n");
  const SingleResults single = time_singles(singles, bufs, o);
  const StepResults step = time_mlp_step(singles, bufs, o);
  const double per_example = step.flops / kBatch;
  std::printf("\npeak %.1f GFLOP/s (%s); mlp step %.3f MFLOP per example, best %.1f GFLOP/s\n",
              single.peak, single.peak_how.c_str(), per_example / 1e6, step.best);
  if (!o.json_path.empty()) write_json(o, parallel, single, step, per_example);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sgemm: %s\n", e.what());
  return 2;
}
