// The training batch's gather (data::gather, the first phase of a CPU step): 128 random rows
// of Fashion-MNIST (standardized, as the shipped configs load it) into a batch, from the
// byte codes (the default for byte datasets, byte_codes.hpp) and from the float32 images
// (the same dataset with its codes dropped), alternating round by round.
//   bench_gather [--threads 2] [--batch 128] [--reps 2000] [--rounds 4] [--path DIR]
// Prints per round and source the best and median microseconds per batch, then a JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/data/dataset.hpp"
#include "kernels/cpu/gemm.hpp"

using namespace codistill;

int main(int argc, char** argv) {
  try {
    int threads = 2, reps = 2000, rounds = 4;
    std::int64_t batch = 128;
    DataConfig cfg;  // fashion-mnist, standard
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      const std::string v = argv[++i];
      if (k == "--threads") threads = std::stoi(v);
      else if (k == "--batch") batch = std::stoll(v);
      else if (k == "--reps") reps = std::stoi(v);
      else if (k == "--rounds") rounds = std::stoi(v);
      else if (k == "--path") cfg.path = v;
      else throw std::invalid_argument("unknown argument " + k + " (valid: --threads --batch --reps --rounds --path)");
    }
    kernels::cpu::set_num_threads(threads);
    const data::Splits s = data::load_dataset(cfg);
    if (s.train.codes.empty()) throw std::runtime_error("the training split has no byte codes");
    data::Dataset floats = s.train;
    floats.codes.clear();
    std::mt19937_64 rng(1);
    kernels::Tensor out = kernels::Tensor::empty({batch, 1, 28, 28}, kernels::DType::f32);
    std::vector<std::int32_t> labels;
    std::vector<std::int64_t> idx(static_cast<std::size_t>(batch));
    double best[2] = {1e30, 1e30};
    std::vector<double> medians[2];
    std::printf("bench_gather: %lld rows of %s, %d threads, %d reps per round\n", static_cast<long long>(batch),
                cfg.path.c_str(), threads, reps);
    for (int r = 0; r < rounds; ++r)
      for (int w = 0; w < 2; ++w) {
        const data::Dataset& d = w == 0 ? s.train : floats;
        std::vector<double> t;
        for (int rep = 0; rep < reps; ++rep) {
          for (auto& i : idx) i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(d.size()));
          const auto t0 = std::chrono::steady_clock::now();
          data::gather(d, idx, out, labels, /*parallel=*/true);
          t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        best[w] = std::min(best[w], t.front());
        medians[w].push_back(t[t.size() / 2]);
        std::printf("round %d %-6s best %.1f us  median %.1f us\n", r + 1, w == 0 ? "codes" : "floats", t.front(),
                    t[t.size() / 2]);
      }
    for (auto& m : medians) std::sort(m.begin(), m.end());
    std::printf("{\"bench\":\"gather\",\"batch\":%lld,\"threads\":%d,\"codes_best_us\":%.2f,\"codes_median_us\":%.2f,"
                "\"floats_best_us\":%.2f,\"floats_median_us\":%.2f}\n",
                static_cast<long long>(batch), threads, best[0], medians[0][medians[0].size() / 2], best[1],
                medians[1][medians[1].size() / 2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gather: %s\n", e.what());
    return 1;
  }
}
