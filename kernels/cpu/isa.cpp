#include "kernels/cpu/isa.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace codistill::kernels::cpu {

Isa best_isa() {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
    return Isa::baseline;
  }();
  return best;
}

Isa chosen_isa() {
  const char* want = std::getenv("CODISTILL_CPU_ISA");
  if (!want || !*want) return best_isa();
  const std::string w(want);
  Isa isa;
  if (w == "baseline") isa = Isa::baseline;
  else if (w == "avx2") isa = Isa::avx2;
  else if (w == "avx512") isa = Isa::avx512;
  else
    throw std::invalid_argument("CODISTILL_CPU_ISA='" + w + "' is not one of: baseline, avx2, avx512");
  return std::min(isa, best_isa());
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::baseline: break;
  }
  return "baseline";
}

}  // namespace codistill::kernels::cpu
