#pragma once
// Which x86-64 vector ISA a fast path's hand-dispatched loops run in. The build targets
// baseline x86-64 (no -march), so a hot loop that matters is compiled once per ISA
// (__attribute__((target(...))) on the one non-inlined function around it) and picked at
// run time. Used by the fused loss (distill_loss.cpp), the batch-norm rows
// (batchnorm_rows.cpp), the optimizer updates (optimizer.cpp) and the row bias gradient
// (bias.cpp).
namespace codistill::kernels::cpu {

enum class Isa { baseline = 0, avx2 = 1, avx512 = 2 };

// The best this CPU runs (AVX-512 F/VL/BW/DQ, else AVX2 + FMA, else baseline), probed once.
Isa best_isa();

// CODISTILL_CPU_ISA=baseline|avx2|avx512 lowers the variant (tests use it to cover the
// code that machines without AVX-512 run); it never selects one the CPU cannot run. Read on
// every call; an unknown value throws std::invalid_argument listing the valid ones.
Isa chosen_isa();

// "baseline", "avx2" or "avx512": what a benchmark records as the code it ran.
const char* isa_name(Isa isa);

// Whether the CPU has AMX-BF16 tiles and the OS saves their state (XCR0's tile bits), probed
// once: where it does, oneDNN's bf16 matmul runs on AMX and beats the float32 sgemm
// (kernels/cpu/bf16.hpp, default_bf16_kernel).
bool has_amx_bf16();
// Whether the CPU has AVX512-BF16 (vdpbf16ps) and is AMD's (Zen 4 and later), probed once:
// there oneDNN's bf16 matmul beat the float32 path (a GPT step 1.27x faster on a Zen 4),
// while on an Intel core without AMX vdpbf16ps runs at half the FMAs' rate.
bool amd_avx512_bf16();

}  // namespace codistill::kernels::cpu

// The target attribute of a function's AVX-512 copy. Zen 4 and recent Intel cores run
// 512-bit vectors at full width for these loops, hence the explicit preference (GCC's
// default tuning stops at 256 bits). Clang spells the preference min_vector_width: it drops
// a target attribute naming prefer-vector-width as a whole, and with it the AVX-512 code
// (the sanitized and fuzz builds are clang's).
#if defined(__clang__)
#define CODISTILL_TARGET_AVX512                                                   \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"), \
                 min_vector_width(512)))
#else
#define CODISTILL_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512")))
#endif
#define CODISTILL_TARGET_AVX2 __attribute__((target("avx2,fma")))
