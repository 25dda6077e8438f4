// The optimizer update in place against out of place (kernels::UpdateSource: what the step
// after an asynchronous checkpoint runs on the CPU, instead of copying the state), over one
// flat arena of N parameters with SGD momentum (or AdamW), and against a memcpy of the same
// state on one thread (the helper-thread copy the out-of-place update replaces). Below
// kernels::cpu::kStreamMinBytes per array the out-of-place update does not stream. The three alternate, R rounds; best and median ms.
//   bench_optimizer_update [--params N] [--threads T] [--rounds R] [--adamw 1]
// Out of place writes blocks already touched (as the trainer's spare blocks are), so page
// faults are not timed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/tensor.hpp"

using namespace codistill;
using kernels::Tensor;

namespace {

double ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void report(const char* what, std::vector<double> t) {
  std::sort(t.begin(), t.end());
  std::printf("%-34s best %8.1f  median %8.1f ms\n", what, t.front(), t[t.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) try {
  int params = 100110010, threads = 2, rounds = 7;  // the checkpoint-stall bench's MLP
  bool adamw = false;
  bench::ArgReader r(argc, argv);
  while (r.next()) {
    if (r.key() == "--params") params = r.count(1);
    else if (r.key() == "--threads") threads = r.count(1);
    else if (r.key() == "--rounds") rounds = r.count(1);
    else if (r.key() == "--adamw") adamw = r.count(0) != 0;
    else throw std::invalid_argument("unknown option " + r.key() + " (valid: --params --threads --rounds --adamw)");
  }
  omp_set_num_threads(threads);
  const std::int64_t n = params;
  const int slots = adamw ? 2 : 1;
  auto block = [&](double v) { return Tensor::full({n}, v); };  // touched, 64-byte aligned
  Tensor g = block(0.01), p = block(1.0), p2 = block(0.0);
  std::vector<Tensor> s, s2;
  for (int k = 0; k < slots; ++k) {
    s.push_back(block(0.0));
    s2.push_back(block(0.0));
  }
  kernels::SgdScalars sgd{0.001, 0.0, 0.9, false};
  kernels::AdamWScalars adam;
  adam.step_size = 1e-3;
  auto step = [&](const float* p_from, const float* s0_from, const float* s1_from, float* p_out, float* s0,
                  float* s1) {
    if (adamw)
      kernels::cpu::adamw_update<float>(p_out, g.data<float>(), s0, s1, n, adam, kernels::cpu::Impl::fast, p_from,
                                        s0_from, s1_from);
    else
      kernels::cpu::sgd_update<float>(p_out, g.data<float>(), s0, n, sgd, kernels::cpu::Impl::fast, p_from, s0_from);
  };
  std::vector<double> in_place, out_of_place, copy;
  for (int round = 0; round < rounds; ++round) {
    in_place.push_back(ms([&] {
      step(nullptr, nullptr, nullptr, p.data<float>(), s[0].data<float>(), adamw ? s[1].data<float>() : nullptr);
    }));
    out_of_place.push_back(ms([&] {
      step(p.data<float>(), s[0].data<float>(), adamw ? s[1].data<float>() : nullptr, p2.data<float>(),
           s2[0].data<float>(), adamw ? s2[1].data<float>() : nullptr);
    }));
    copy.push_back(ms([&] {
      std::memcpy(p2.raw(), p.raw(), p.nbytes());
      for (int k = 0; k < slots; ++k) std::memcpy(s2[k].raw(), s[k].raw(), s[k].nbytes());
    }));
  }
  std::printf("%s over %d parameters, %d thread(s), %d rounds (alternating), ISA %s\n", adamw ? "adamw" : "sgd momentum",
              params, threads, rounds, kernels::cpu::isa_name(kernels::cpu::chosen_isa()));
  report("update in place", in_place);
  report("update out of place", out_of_place);
  report("memcpy of the state (1 thread)", copy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_optimizer_update: %s\n", e.what());
  return 2;
}
