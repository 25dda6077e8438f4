// Causal self-attention on the CPU: the materialized op (kernels/cpu/sequence/attention.hpp,
// probabilities [B, H, T, T] kept for the backward) against flash attention
// (flash_attention.hpp, the log-sum-exp [B, H, T] kept instead), one forward + backward per
// call, in float32.
//   bench_attention [--T 256,512,...] [--B 1] [--H 12] [--hd 64] [--threads 2] [--repeats 5]
// For each T the two contenders alternate call by call (materialized first on even
// repeats, flash first on odd ones), so that a change of the machine's load lands on both;
// after one warm-up call each, best and median of the repeats (forward + backward), and the
// medians of the forward and the backward alone. The bytes columns are what
// each keeps between forward and backward beyond qkv and y (which both keep), and the
// backward's own T x T scratch (the materialized op's dP / dS).
//   bench_attention --only flash|flash-bf16|materialized --T 2048 [...]
// runs that kernel alone (flash-bf16: flash attention with bf16 operands, Compute::bf16, as
// train.precision: bf16 runs it) (only its buffers allocated) and prints one JSON line per length
// with its peak resident memory (VmHWM, MiB): the process-per-contender form of
// bench/run_attention_bench.sh, beside PyTorch and JAX (bench/py_attention.py).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "bench/proc_status.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/sequence/attention.hpp"
#include "kernels/cpu/sequence/flash_attention.hpp"

namespace cpu = codistill::kernels::cpu;
using codistill::kernels::AttentionShape;
using codistill::kernels::Compute;

namespace {

struct Args {
  std::vector<std::int64_t> seqs = {256, 512, 1024, 2048, 4096};
  std::int64_t B = 1, H = 12, hd = 64;
  int threads = 2, repeats = 5;
  std::string only;  // "", "flash", "flash-bf16" or "materialized"
};

std::vector<std::int64_t> list_of(const std::string& v) {
  std::vector<std::int64_t> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  if (out.empty()) throw std::invalid_argument("--T needs a comma-separated list of lengths");
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  codistill::bench::ArgReader r(argc, argv);
  while (r.next()) {
    const std::string& k = r.key();
    if (k == "--T") a.seqs = list_of(r.value());
    else if (k == "--B") a.B = r.count(1);
    else if (k == "--H") a.H = r.count(1);
    else if (k == "--hd") a.hd = r.count(1);
    else if (k == "--threads") a.threads = r.count(1);
    else if (k == "--repeats") a.repeats = r.count(3);
    else if (k == "--only") a.only = r.value();
    else throw std::invalid_argument("unknown option " + k + " (valid: --T --B --H --hd --threads --repeats --only)");
  }
  if (!a.only.empty() && a.only != "flash" && a.only != "flash-bf16" && a.only != "materialized")
    throw std::invalid_argument("--only '" + a.only + "': flash, flash-bf16 or materialized");
  return a;
}

// One contender's buffers: inputs shared, outputs and saved state its own.
struct Problem {
  AttentionShape s;
  std::vector<float> qkv, dy, y, dqkv, probs, scratch, lse;
};

// only: "" (both kernels' buffers), or one kernel's (the other's saved state left empty).
Problem make_problem(const AttentionShape& s, const std::string& only = "") {
  const std::size_t rows = static_cast<std::size_t>(s.rows()), D = static_cast<std::size_t>(s.d_model());
  const std::size_t tt = only.starts_with("flash") ? 0 : static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq);
  Problem p{s, std::vector<float>(rows * 3 * D), std::vector<float>(rows * D), std::vector<float>(rows * D),
            std::vector<float>(rows * 3 * D), std::vector<float>(tt), std::vector<float>(tt),
            std::vector<float>(static_cast<std::size_t>(s.batch * s.heads * s.seq))};
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : p.qkv) x = u(gen);
  for (float& x : p.dy) x = u(gen);
  return p;
}

// One call's forward and backward times in ms.
struct Times {
  double fwd, bwd;
};

Times call_ms(Problem& p, bool flash, Compute compute = Compute::f32) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (flash) cpu::flash_attention_forward<float>(p.qkv.data(), p.y.data(), p.lse.data(), p.s, cpu::Impl::fast, compute);
  else cpu::attention_forward<float>(p.qkv.data(), p.y.data(), p.probs.data(), p.s);
  const auto t1 = Clock::now();
  if (flash)
    cpu::flash_attention_backward<float>(p.qkv.data(), p.y.data(), p.lse.data(), p.dy.data(), p.dqkv.data(), p.s,
                                         cpu::Impl::fast, compute);
  else
    cpu::attention_backward<float>(p.qkv.data(), p.probs.data(), p.dy.data(), p.dqkv.data(), p.scratch.data(), p.s);
  const auto t2 = Clock::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(),
          std::chrono::duration<double, std::milli>(t2 - t1).count()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void run_length(const Args& a, std::int64_t T) {
  const AttentionShape s{a.B, T, a.H, a.hd};
  Problem p = make_problem(s);
  std::vector<double> total[2], fwd[2], bwd[2];
  call_ms(p, false), call_ms(p, true);  // warm-up: first touch of the buffers, library setup
  for (int r = 0; r < a.repeats; ++r)
    for (int i = 0; i < 2; ++i) {
      const bool flash = (i == 0) == (r % 2 == 1);
      const Times t = call_ms(p, flash);
      total[flash].push_back(t.fwd + t.bwd), fwd[flash].push_back(t.fwd), bwd[flash].push_back(t.bwd);
    }
  const double tt_bytes = 4.0 * static_cast<double>(a.B * a.H * T * T);
  const double lse_bytes = 4.0 * static_cast<double>(a.B * a.H * T);
  for (int flash = 0; flash < 2; ++flash)
    std::printf("%6lld  %-12s  %10.2f  %10.2f  %10.2f  %10.2f  %14.0f  %14.0f\n", static_cast<long long>(T),
                flash ? "flash" : "materialized", *std::min_element(total[flash].begin(), total[flash].end()),
                median(total[flash]), median(fwd[flash]), median(bwd[flash]), flash ? lse_bytes : tt_bytes,
                flash ? 0.0 : tt_bytes);
  std::printf("%6lld  flash/materialized median: %.2f\n", static_cast<long long>(T),
              median(total[1]) / median(total[0]));
  std::fflush(stdout);
}

// --only: one kernel, this process's memory its own; a JSON line per length.
void run_alone(const Args& a, std::int64_t T) {
  const bool flash = a.only.starts_with("flash");
  const Compute compute = a.only == "flash-bf16" ? Compute::bf16 : Compute::f32;
  const long base_kb = codistill::bench::status_kb("VmRSS");  // before this length's buffers
  Problem p = make_problem(AttentionShape{a.B, T, a.H, a.hd}, a.only);
  std::vector<double> total, fwd;
  call_ms(p, flash, compute);  // warm-up
  for (int r = 0; r < a.repeats; ++r) {
    const Times t = call_ms(p, flash, compute);
    total.push_back(t.fwd + t.bwd), fwd.push_back(t.fwd);
  }
  std::printf("{\"contender\": \"codistill-%s\", \"B\": %lld, \"T\": %lld, \"H\": %lld, \"hd\": %lld, "
              "\"threads\": %d, \"repeats\": %d, \"best_ms\": %.3f, \"median_ms\": %.3f, \"fwd_median_ms\": %.3f, "
              "\"peak_rss_mib\": %.1f, \"base_rss_mib\": %.1f}\n",
              a.only.c_str(), static_cast<long long>(a.B), static_cast<long long>(T), static_cast<long long>(a.H),
              static_cast<long long>(a.hd), a.threads, a.repeats, *std::min_element(total.begin(), total.end()),
              median(total), median(fwd), static_cast<double>(codistill::bench::status_kb("VmHWM")) / 1024.0,
              static_cast<double>(base_kb) / 1024.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    cpu::set_num_threads(a.threads);
    if (!a.only.empty()) {
      for (std::int64_t T : a.seqs) run_alone(a, T);
      return 0;
    }
    std::printf("# causal attention fwd+bwd, float32, B=%lld H=%lld head_dim=%lld, %d threads, %d repeats, isa %s, "
                "flash block %lld\n",
                static_cast<long long>(a.B), static_cast<long long>(a.H), static_cast<long long>(a.hd), a.threads,
                a.repeats, cpu::isa_name(cpu::chosen_isa()), static_cast<long long>(cpu::kFlashBlock));
    std::printf("%6s  %-12s  %10s  %10s  %10s  %10s  %14s  %14s\n", "T", "kernel", "best_ms", "median_ms",
                "fwd_med_ms", "bwd_med_ms", "saved_bytes", "bwd_scratch_B");
    for (std::int64_t T : a.seqs) run_length(a, T);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
