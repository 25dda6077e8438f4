// Causal self-attention on a CUDA device: the materialized op (cuBLAS products around the
// softmax kernels, probabilities [B, H, T, T] kept for the backward, a [B, H, T, T] scratch
// in it) against flash attention (custom tile kernels, the log-sum-exp [B, H, T] kept),
// forward + backward through the backend's entry points, float32 (GPT-2 small's heads by
// default). bench/run_gpu_session.sh runs it (stage "attention").
//   bench_attention_cuda [--T 1024,2048,4096] [--B 4] [--H 12] [--hd 64] [--repeats 10]
//                        [--kernels materialized,flash] [--tf32 0|1] [--device 0]
// Times: host wall clock around each call, the queue synchronized before the clock stops
// (a call is milliseconds, the synchronization microseconds); one warm-up call each, then
// best and median of the repeats, and the medians of forward and backward alone. The two
// alternate call by call. Memory: what each keeps between forward and backward beyond qkv
// and y, its backward's own scratch, and the device's peak (the allocator's, whole process:
// run one kernel per process, --kernels flash then --kernels materialized, for a peak of
// each alone). No CUDA runtime call here: the backend API only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"

namespace k = codistill::kernels;
using k::AttentionShape;
using k::Tensor;

namespace {

struct Args {
  std::vector<std::int64_t> seqs = {1024, 2048, 4096};
  std::int64_t B = 4, H = 12, hd = 64;
  int repeats = 10, device = 0;
  bool tf32 = false, materialized = true, flash = true;
};

std::vector<std::string> split(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  if (out.empty()) throw std::invalid_argument("empty list '" + v + "'");
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  codistill::bench::ArgReader r(argc, argv);
  while (r.next()) {
    const std::string& key = r.key();
    if (key == "--T") {
      a.seqs.clear();
      for (const std::string& t : split(r.value())) a.seqs.push_back(std::stoll(t));
    } else if (key == "--B") a.B = r.count(1);
    else if (key == "--H") a.H = r.count(1);
    else if (key == "--hd") a.hd = r.count(1);
    else if (key == "--repeats") a.repeats = r.count(3);
    else if (key == "--tf32") a.tf32 = r.count(0) != 0;
    else if (key == "--device") a.device = r.count(0);
    else if (key == "--kernels") {
      const std::vector<std::string> ks = split(r.value());
      a.materialized = std::find(ks.begin(), ks.end(), "materialized") != ks.end();
      a.flash = std::find(ks.begin(), ks.end(), "flash") != ks.end();
      if (!a.materialized && !a.flash) throw std::invalid_argument("--kernels: materialized and/or flash");
    } else
      throw std::invalid_argument("unknown option " + key +
                                  " (valid: --T --B --H --hd --repeats --kernels --tf32 --device)");
  }
  return a;
}

Tensor random_on(k::Shape shape, k::Device dev, unsigned seed) {
  std::vector<float> v(static_cast<std::size_t>(k::shape_numel(shape)));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : v) x = u(gen);
  return Tensor::from_vector(shape, v).to(dev);
}

// One contender's tensors on the device: inputs shared, outputs and saved state its own.
struct Problem {
  AttentionShape s;
  Tensor qkv, dy, y, dqkv, probs, scratch, lse;
};

struct Times {
  double fwd, bwd;
};

Times call_ms(Problem& p, bool flash, k::Queue& q) {
  using Clock = std::chrono::steady_clock;
  k::Backend& be = q.backend();
  const auto t0 = Clock::now();
  if (flash) be.flash_attention_forward(p.qkv, p.y, p.lse, p.s, q);
  else be.attention_forward(p.qkv, p.y, p.probs, p.s, q);
  q.synchronize();
  const auto t1 = Clock::now();
  if (flash) be.flash_attention_backward(p.qkv, p.y, p.lse, p.dy, p.dqkv, p.s, q);
  else be.attention_backward(p.qkv, p.probs, p.dy, p.dqkv, p.scratch, p.s, q);
  q.synchronize();
  const auto t2 = Clock::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(),
          std::chrono::duration<double, std::milli>(t2 - t1).count()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void run_length(const Args& a, std::int64_t T, k::Queue& q) {
  const AttentionShape s{a.B, T, a.H, a.hd};
  const k::Device dev = q.device();
  const std::int64_t rows = s.rows(), D = s.d_model();
  const auto f32 = k::DType::f32;
  Problem p{s, random_on({rows, 3 * D}, dev, 7), random_on({rows, D}, dev, 8), Tensor::empty({rows, D}, f32, dev),
            Tensor::empty({rows, 3 * D}, f32, dev), {}, {}, {}};
  const k::Shape tt{s.batch, s.heads, T, T};
  if (a.materialized) p.probs = Tensor::empty(tt, f32, dev), p.scratch = Tensor::empty(tt, f32, dev);
  if (a.flash) p.lse = Tensor::empty({s.batch, s.heads, T}, f32, dev);
  std::vector<bool> who;
  if (a.materialized) who.push_back(false);
  if (a.flash) who.push_back(true);
  for (bool flash : who) call_ms(p, flash, q);  // warm-up: allocator, cuBLAS and kernel set-up
  std::vector<double> total[2], fwd[2], bwd[2];
  for (int r = 0; r < a.repeats; ++r)
    for (std::size_t i = 0; i < who.size(); ++i) {
      const bool flash = who[(i + static_cast<std::size_t>(r)) % who.size()];
      const Times t = call_ms(p, flash, q);
      total[flash].push_back(t.fwd + t.bwd), fwd[flash].push_back(t.fwd), bwd[flash].push_back(t.bwd);
    }
  const double tt_bytes = 4.0 * static_cast<double>(a.B * a.H * T * T);
  const double lse_bytes = 4.0 * static_cast<double>(a.B * a.H * T);  // lse, and the backward's D
  const auto mem = q.backend().device_memory(dev.index);
  const double peak_mib = mem && mem->peak >= 0 ? static_cast<double>(mem->peak) / (1 << 20) : -1.0;
  for (bool flash : who)
    std::printf("%6lld  %-12s  %10.3f  %10.3f  %10.3f  %10.3f  %14.0f  %14.0f  %12.1f\n", static_cast<long long>(T),
                flash ? "flash" : "materialized", *std::min_element(total[flash].begin(), total[flash].end()),
                median(total[flash]), median(fwd[flash]), median(bwd[flash]), flash ? lse_bytes : tt_bytes,
                flash ? lse_bytes : tt_bytes, peak_mib);
  if (who.size() == 2)
    std::printf("%6lld  flash/materialized median: %.2f\n", static_cast<long long>(T),
                median(total[1]) / median(total[0]));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    k::Backend& be = k::backend_for(k::DeviceKind::cuda);
    if (be.device_count() == 0) throw std::runtime_error("no CUDA device: " + be.unavailable_reason());
    k::QueueOptions opts;
    opts.allow_tf32 = a.tf32;
    auto q = be.make_queue(k::Device::cuda(a.device), opts);
    std::printf("# causal attention fwd+bwd on CUDA, float32%s, B=%lld H=%lld head_dim=%lld, %d repeats\n",
                a.tf32 ? " (materialized products in TF32)" : "", static_cast<long long>(a.B),
                static_cast<long long>(a.H), static_cast<long long>(a.hd), a.repeats);
    std::printf("%6s  %-12s  %10s  %10s  %10s  %10s  %14s  %14s  %12s\n", "T", "kernel", "best_ms", "median_ms",
                "fwd_med_ms", "bwd_med_ms", "saved_bytes", "bwd_scratch_B", "dev_peak_MiB");
    for (std::int64_t T : a.seqs) run_length(a, T, *q);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_cuda: %s\n", e.what());
    return 1;
  }
}
