// The fused linear + distillation head on the CPU (kernels/cpu/loss/distill_head.hpp), one shape
// per process, for bench/run_fused_head_bench.sh (which runs bench/torch_fused_head.py, the
// unfused PyTorch path, beside it, each contender in its own process).
//   bench_fused_head --N N --H H --V V --K K [--threads T] [--calls C] [--warmup W]
//                    [--workspace-mb MB] [--json PATH]
//   bench_fused_head --dump DIR   (a small shared problem and our outputs, raw float32/int32
//                                  little-endian, for torch_fused_head.py --check)
// One call = the head's forward and backward over all N rows: the student's and K teachers'
// logits, the loss of DESIGN.md section 6 (T = 2, a = 1, h = 1), dh and dW (no bias). The
// time is the median of C calls after W warm-up calls. Peak memory: VmHWM (the resident
// high-water mark, /proc/self/status) at the end minus VmRSS once the inputs (h, W, the
// teachers' h_k, W_k, labels) are allocated and written: what the call itself needed,
// the gradient outputs dh and dW included (they are allocated after that point, as
// autograd allocates them in PyTorch); "working" subtracts dh and dW again.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/proc_status.hpp"
#include "kernels/cpu/loss/distill_head.hpp"

namespace cpu = codistill::kernels::cpu;

namespace {

struct Args {
  std::int64_t N = 1024, H = 768, V = 32768;
  int K = 1, threads = 2, calls = 3, warmup = 1;
  double workspace_mb = 64;
  std::string json, dump;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--N") a.N = std::stoll(next());
    else if (k == "--H") a.H = std::stoll(next());
    else if (k == "--V") a.V = std::stoll(next());
    else if (k == "--K") a.K = std::stoi(next());
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--calls") a.calls = std::stoi(next());
    else if (k == "--warmup") a.warmup = std::stoi(next());
    else if (k == "--workspace-mb") a.workspace_mb = std::stod(next());
    else if (k == "--json") a.json = next();
    else if (k == "--dump") a.dump = next();
    else throw std::invalid_argument("unknown option " + k);
  }
  return a;
}

using codistill::bench::status_kb;

struct Problem {
  std::int64_t N, H, V;
  int K;
  std::vector<float> h, w;
  std::vector<std::vector<float>> th, tw;
  std::vector<std::int32_t> labels;
  std::vector<cpu::HeadTeacherPtrs<float>> teachers;
};

// Hidden states ~ U(-1, 1), weights ~ U(-3/sqrt(H), 3/sqrt(H)): logits of a few units.
Problem make(std::int64_t N, std::int64_t H, std::int64_t V, int K, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  const float a = 3.0f / std::sqrt(static_cast<float>(H));
  Problem p{N, H, V, K, {}, {}, {}, {}, {}, {}};
  auto fill = [&](std::vector<float>& x, std::int64_t n, float s) {
    x.resize(static_cast<std::size_t>(n));
    for (auto& e : x) e = s * u(gen);
  };
  fill(p.h, N * H, 1.0f);
  fill(p.w, V * H, a);
  p.th.resize(K), p.tw.resize(K);
  for (int k = 0; k < K; ++k) fill(p.th[k], N * H, 1.0f), fill(p.tw[k], V * H, a);
  for (std::int64_t r = 0; r < N; ++r) p.labels.push_back(static_cast<std::int32_t>(gen() % V));
  for (int k = 0; k < K; ++k) p.teachers.push_back({p.th[k].data(), p.tw[k].data(), nullptr, H});
  return p;
}

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + path);
}

cpu::DistillHeadParams params(double workspace_mb) {
  cpu::DistillHeadParams p;
  p.loss = {2.0, 1.0, 1.0};
  p.workspace_bytes = static_cast<std::size_t>(workspace_mb * (1 << 20));
  return p;
}

// A small problem (N=37 H=24 V=1000 K=2, one row ignored, chunks of 8 rows) and our outputs.
int dump(const std::string& dir) {
  Problem p = make(37, 24, 1000, 2, 11);
  p.labels[5] = -1;
  std::vector<float> dh(p.N * p.H), dw(p.V * p.H, 0.0f);
  auto hp = params(0);
  hp.workspace_bytes = 3 * 8 * 1000 * sizeof(float);
  const auto r = cpu::linear_distill_head<float>(p.h.data(), p.w.data(), nullptr, p.N, p.H, p.V, p.teachers.data(),
                                                 p.K, p.labels.data(), dh.data(), dw.data(), nullptr, hp);
  write(dir + "/h.f32", p.h), write(dir + "/w.f32", p.w), write(dir + "/labels.i32", p.labels);
  for (int k = 0; k < p.K; ++k)
    write(dir + "/th" + std::to_string(k) + ".f32", p.th[k]), write(dir + "/tw" + std::to_string(k) + ".f32", p.tw[k]);
  write(dir + "/dh.f32", dh), write(dir + "/dw.f32", dw);
  write(dir + "/loss.f64", std::vector<double>{r.loss});
  std::printf("{\"N\": %lld, \"H\": %lld, \"V\": %lld, \"K\": %d, \"T\": 2.0, \"loss\": %.17g}\n",
              static_cast<long long>(p.N), static_cast<long long>(p.H), static_cast<long long>(p.V), p.K, r.loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  if (!a.dump.empty()) return dump(a.dump);
  omp_set_num_threads(a.threads);
  const Problem p = make(a.N, a.H, a.V, a.K, 1);
  const long base_kb = status_kb("VmRSS");  // inputs allocated and written
  std::vector<float> dh(static_cast<std::size_t>(a.N * a.H)), dw(static_cast<std::size_t>(a.V * a.H));
  const auto hp = params(a.workspace_mb);
  std::vector<double> times;
  double loss = 0;
  for (int i = 0; i < a.warmup + a.calls; ++i) {
    std::fill(dw.begin(), dw.end(), 0.0f);  // zero_grad, as PyTorch's step does
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = cpu::linear_distill_head<float>(p.h.data(), p.w.data(), nullptr, a.N, a.H, a.V,
                                                   p.teachers.data(), a.K, p.labels.data(), dh.data(), dw.data(),
                                                   nullptr, hp);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = r.loss;
    if (i >= a.warmup) times.push_back(s);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const long peak_kb = status_kb("VmHWM");
  const double extra = (peak_kb - base_kb) * 1024.0;
  const double grads = static_cast<double>(dh.size() + dw.size()) * sizeof(float);
  const std::int64_t chunk = codistill::kernels::distill_head_chunk_rows(a.N, a.V, a.K, 4, hp.workspace_bytes);
  char line[1024];
  std::snprintf(line, sizeof line,
                "{\"contender\": \"codistill\", \"N\": %lld, \"H\": %lld, \"V\": %lld, \"K\": %d, \"threads\": %d, "
                "\"calls\": %d, \"median_s\": %.6f, \"best_s\": %.6f, \"peak_extra_bytes\": %.0f, "
                "\"working_bytes\": %.0f, \"logits_bytes\": %lld, \"chunk_rows\": %lld, \"loss\": %.9g}",
                static_cast<long long>(a.N), static_cast<long long>(a.H), static_cast<long long>(a.V), a.K, a.threads,
                a.calls, median, times.front(), extra, extra - grads, static_cast<long long>(a.N * a.V * 4),
                static_cast<long long>(chunk), loss);
  std::printf("%s\n", line);
  if (!a.json.empty()) std::ofstream(a.json) << line << "\n";
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_fused_head: %s\n", e.what());
  return 2;
}
