#include "kernels/cpu/isa.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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

bool has_amx_bf16() {
  static const bool amx = [] {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22))) return false;  // CPUID.7.0:EDX[22]
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;             // OSXSAVE: xgetbv works
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA enabled by the OS
#else
    return false;
#endif
  }();
  return amx;
}

bool amd_avx512_bf16() {
  static const bool amd = [] {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    const bool vendor = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    if (!vendor || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a & (1u << 5)) != 0;  // CPUID.(7,1):EAX[5] AVX512_BF16
#else
    return false;
#endif
  }();
  return amd;
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
