// Fused distillation loss on the CPU, forward + backward: fast path and reference at the
// shapes of the loss benchmark (bench/run_loss_bench.sh runs it beside PyTorch).
//   bench_loss [--threads N] [--repeats R] [--warmup W] [--ref-repeats R] [--json PATH]
//              [--dump DIR] [--only I]
// Times are the median over R calls after W warm-up calls, one call = loss + gradient of
// every row (grad written out of place into a buffer reused across calls). --dump DIR
// only writes one small shared input and our outputs as raw little-endian files, for
// bench/torch_loss.py --check to recompute with PyTorch, and times nothing. --only I times the I-th shape
// alone (1-based), so that a script can alternate with PyTorch shape by shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/loss/distill_loss.hpp"

namespace cpu = codistill::kernels::cpu;

namespace {

struct Shape {
  std::int64_t N, V;
  int K;
};

struct Inputs {
  std::vector<float> student;
  std::vector<std::vector<float>> teachers;
  std::vector<const float*> tptr;
  std::vector<std::int32_t> labels;
};

// Logits ~ N(0, 2^2), the scale of a trained classifier's outputs; every row counted.
Inputs make_inputs(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  Inputs in;
  in.student.resize(s.N * s.V);
  for (auto& x : in.student) x = logit(gen);
  in.teachers.resize(s.K);
  for (auto& t : in.teachers) {
    t.resize(s.N * s.V);
    for (auto& x : t) x = logit(gen);
    in.tptr.push_back(t.data());
  }
  std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(s.V - 1));
  for (std::int64_t r = 0; r < s.N; ++r) in.labels.push_back(label(gen));
  return in;
}

struct Timing {
  double median_ms, min_ms;
  cpu::DistillLossResult result;
};

Timing time_loss(const Shape& s, const Inputs& in, std::vector<float>& grad,
                 const cpu::DistillLossParams& p, cpu::Impl impl, int warmup, int repeats) {
  cpu::DistillLossResult res;
  auto call = [&] {
    res = cpu::distill_loss(in.student.data(), in.tptr.data(), s.K, in.labels.data(), grad.data(),
                            s.N, s.V, p, impl);
  };
  for (int i = 0; i < warmup; ++i) call();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), res};
}

template <class T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// A shared input for the PyTorch cross-check: some rows ignored, K = 2, T = 2.
void dump_check(const std::string& dir) {
  const Shape s{64, 1000, 2};
  Inputs in = make_inputs(s, 2024);
  for (std::int64_t r = 5; r < s.N; r += 9) in.labels[r] = -1;
  const cpu::DistillLossParams p{2.0, 0.7, 1.3};
  std::vector<float> grad(s.N * s.V);
  const auto res = cpu::distill_loss(in.student.data(), in.tptr.data(), s.K, in.labels.data(),
                                     grad.data(), s.N, s.V, p);
  write_raw(dir + "/student.f32", in.student);
  for (int k = 0; k < s.K; ++k)
    write_raw(dir + "/teacher" + std::to_string(k) + ".f32", in.teachers[k]);
  write_raw(dir + "/labels.i32", in.labels);
  write_raw(dir + "/grad.f32", grad);
  const nlohmann::json meta = {{"N", s.N}, {"V", s.V}, {"K", s.K}, {"temperature", p.temperature},
                               {"weight", p.weight}, {"hard_weight", p.hard_weight},
                               {"loss", res.loss}, {"ce", res.ce}, {"distill", res.distill},
                               {"rows", res.rows}};
  std::ofstream(dir + "/meta.json") << meta.dump(2) << "\n";
}

int int_arg(const char* v, const char* name) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || x < 1)
    throw std::invalid_argument(std::string(name) + " needs a positive integer");
  return static_cast<int>(x);
}

}  // namespace

int main(int argc, char** argv) try {
  int threads = 2, repeats = 20, warmup = 3, ref_repeats = 3, only = -1;
  std::string json_path, dump_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--threads") threads = int_arg(next(), "--threads");
    else if (a == "--repeats") repeats = int_arg(next(), "--repeats");
    else if (a == "--warmup") warmup = int_arg(next(), "--warmup");
    else if (a == "--ref-repeats") ref_repeats = int_arg(next(), "--ref-repeats");
    else if (a == "--json") json_path = next();
    else if (a == "--dump") dump_dir = next();
    else if (a == "--only") only = int_arg(next(), "--only") - 1;
    else throw std::invalid_argument("unknown argument " + a);
  }
  cpu::set_num_threads(threads);
  if (!dump_dir.empty()) {
    dump_check(dump_dir);
    return 0;
  }

  const cpu::DistillLossParams p{2.0, 1.0, 1.0};
  const std::vector<Shape> shapes = {{4096, 1000, 1}, {4096, 1000, 4}, {1024, 32768, 1}};
  nlohmann::json results = nlohmann::json::array();
  std::printf("distill_loss fwd+bwd, float32, T=2 a=1 h=1, %d threads, median of %d "
              "(reference: %d)\n", threads, repeats, ref_repeats);
  std::printf("%6s %6s %2s %11s %11s %8s %9s %12s\n", "N", "V", "K", "fast ms", "ref ms",
              "speedup", "fast GB/s", "loss");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (only >= 0 && static_cast<std::size_t>(only) != i) continue;
    const Shape& s = shapes[i];
    const Inputs in = make_inputs(s, 7 + s.N + s.V + s.K);
    std::vector<float> grad(s.N * s.V);
    const Timing fast = time_loss(s, in, grad, p, cpu::Impl::fast, warmup, repeats);
    const Timing ref = time_loss(s, in, grad, p, cpu::Impl::reference, 1, ref_repeats);
    // Compulsory traffic: student and teachers read once, gradient written once.
    const double gbytes = 4.0 * static_cast<double>(s.N * s.V) * (s.K + 2) / 1e9;
    std::printf("%6lld %6lld %2d %11.3f %11.1f %7.1fx %9.2f %12.6f\n", static_cast<long long>(s.N),
                static_cast<long long>(s.V), s.K, fast.median_ms, ref.median_ms,
                ref.median_ms / fast.median_ms, gbytes / (fast.median_ms / 1e3), fast.result.loss);
    const nlohmann::json f = {{"median_ms", fast.median_ms}, {"min_ms", fast.min_ms},
                              {"repeats", repeats}};
    const nlohmann::json rf = {{"median_ms", ref.median_ms}, {"min_ms", ref.min_ms},
                               {"repeats", ref_repeats}};
    results.push_back({{"N", s.N}, {"V", s.V}, {"K", s.K}, {"temperature", p.temperature},
                       {"fast", f}, {"reference", rf}, {"loss_fast", fast.result.loss},
                       {"loss_reference", ref.result.loss}});
  }
  if (!json_path.empty()) {
    const nlohmann::json doc = {{"benchmark", "loss_cpu"}, {"impl", "codistill"},
                                {"isa", cpu::isa_name(cpu::chosen_isa())},
                                {"threads", threads}, {"warmup", warmup},
                                {"dtype", "float32"}, {"results", results}};
    std::ofstream f(json_path);
    f << doc.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + json_path);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_loss: %s\n", e.what());
  return 2;
}
