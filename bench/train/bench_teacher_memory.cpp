// What one gpt teacher holds in memory, and its forward's time, with its matrices as
// float32 or as bf16 (codistill.teacher_weights), made as TeacherPool makes a teacher:
// forward-only (no gradient block), frozen weights, on a queue computing in bf16
// (codistill.teacher_precision: bf16), on the CPU. One variant per process, so that the
// resident set is this teacher's alone:
//   bench_teacher_memory [--weights float32|bf16] [--B 1] [--T 1024] [--D 768] [--heads 12]
//                        [--layers 12] [--V 50304] [--threads 2] [--forwards 3] [--materialized]
// The defaults are configs/gpt2_124m.yaml's model (tied head, flash attention), with random
// weights. Prints one JSON line: the parameter count, the arena's bytes (held_bytes) and bytes
// per parameter, the resident set (VmRSS) before the model, once it is placed (the weights),
// and after the forwards (plus activations, and the bf16 engine's packed copies of float32
// weights, which it makes on a frozen queue's first forward), its peak (VmHWM), and the
// median and best forward ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/impl.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Tensor;

namespace {

struct Args {
  std::string weights = "bf16";
  std::int64_t B = 1, T = 1024, D = 768, heads = 12, layers = 12, V = 50304;
  int threads = 2, forwards = 3;
  bool flash = true;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--weights") a.weights = value();
    else if (k == "--B") a.B = std::stoll(value());
    else if (k == "--T") a.T = std::stoll(value());
    else if (k == "--D") a.D = std::stoll(value());
    else if (k == "--heads") a.heads = std::stoll(value());
    else if (k == "--layers") a.layers = std::stoll(value());
    else if (k == "--V") a.V = std::stoll(value());
    else if (k == "--threads") a.threads = std::stoi(value());
    else if (k == "--forwards") a.forwards = std::stoi(value());
    else if (k == "--materialized") a.flash = false;
    else throw std::invalid_argument("unknown argument " + k);
  }
  if (a.weights != "float32" && a.weights != "bf16") throw std::invalid_argument("--weights: float32 or bf16");
  if (a.forwards < 1) throw std::invalid_argument("--forwards must be >= 1");
  return a;
}

// A /proc/self/status field in bytes (VmRSS, VmHWM).
long long status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  throw std::runtime_error("no " + field + " in /proc/self/status");
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  kernels::cpu::set_num_threads(a.threads);
  const long long rss0 = status_bytes("VmRSS");
  ModelConfig mc;
  mc.kind = "gpt";
  mc.vocab_size = a.V, mc.seq_len = a.T, mc.d_model = a.D, mc.heads = a.heads, mc.blocks = a.layers;
  mc.tie_embeddings = true, mc.gelu = "tanh", mc.attention = a.flash ? "flash" : "materialized";
  Rng rng(1);
  Model m = build_model(mc, rng);
  // TeacherPool::upload's order: gradients dropped, matrices rounded on the host, then placed.
  if (a.weights == "bf16") m.to_bf16_weights();
  else m.drop_grads();
  kernels::QueueOptions qo;
  qo.compute = kernels::Compute::bf16;
  qo.frozen_params = true;
  m.to_device(kernels::Device::cpu(), qo);
  const long long rss_placed = status_bytes("VmRSS");
  const double params = static_cast<double>(m.num_params());
  const double held = static_cast<double>(m.arena().held_bytes());

  Tensor x = Tensor::empty({a.B, a.T}, DType::i32);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919) % a.V);
  std::vector<double> ms;
  for (int i = 0; i < a.forwards; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(x, /*training=*/false);
    m.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const long long rss_after = status_bytes("VmRSS"), hwm = status_bytes("VmHWM");
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"bench\": \"teacher_memory\", \"weights\": \"%s\", \"B\": %lld, \"T\": %lld, \"D\": %lld, \"layers\": %lld, "
      "\"V\": %lld, \"threads\": %d, \"params\": %.0f, \"arena_bytes\": %.0f, \"arena_bytes_per_param\": %.4f, "
      "\"rss_before_mb\": %.1f, \"rss_placed_mb\": %.1f, \"rss_placed_delta_per_param\": %.4f, "
      "\"rss_after_forward_mb\": %.1f, \"rss_after_forward_delta_per_param\": %.4f, \"rss_peak_mb\": %.1f, "
      "\"forward_ms_median\": %.1f, \"forward_ms_best\": %.1f, \"forwards\": %d}\n",
      a.weights.c_str(), static_cast<long long>(a.B), static_cast<long long>(a.T), static_cast<long long>(a.D),
      static_cast<long long>(a.layers), static_cast<long long>(a.V), a.threads, params, held, held / params,
      rss0 / 1e6, rss_placed / 1e6, static_cast<double>(rss_placed - rss0) / params, rss_after / 1e6,
      static_cast<double>(rss_after - rss0) / params, hwm / 1e6, sorted[sorted.size() / 2], sorted.front(),
      a.forwards);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_teacher_memory: %s\n", e.what());
  return 1;
}
