#pragma once
// bfloat16 on the CPU: the rounding rule of mixed precision (kernels/ops.hpp, Compute::bf16)
// and the GEMM engine that multiplies bf16-rounded float32 operands with float32
// accumulation, by one of two kernels (Bf16Kernel): oneDNN's bf16 matmul, or the rounded
// operands widened to float32 on the float32 sgemm (Debian's OpenBLAS has no sbgemm).
//
// Rounding, float32 -> bfloat16 (the upper 16 bits of a float32): round to nearest, ties to
// even, on the bit pattern, so subnormals round as subnormals (no flush to zero), finite
// values past the largest bf16 become infinities, infinities stay, and a NaN stays a NaN
// (quieted, sign kept). AVX512-BF16's VCVTNEPS2BF16 flushes subnormals; the plain integer
// form below does not, and vectorizes.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "kernels/dtype.hpp"

namespace codistill::kernels::cpu {

using kernels::bf16_round;     // kernels/dtype.hpp
using kernels::bf16_to_float;

// The float32 value bf16 holds for f.
inline float bf16_rounded(float f) { return bf16_to_float(bf16_round(f)); }

// y[i] = bf16_round(x[i]), threaded over OpenMP for long arrays.
void round_to_bf16(const float* x, std::uint16_t* y, std::int64_t n);
// y[i] = bf16_rounded(x[i]) (y may alias x), vectorized and threaded as round_to_bf16.
void round_values_to_bf16(const float* x, float* y, std::int64_t n);
// y[i] = bf16_to_float(x[i]) (exact), vectorized and threaded as round_to_bf16.
void widen_bf16(const std::uint16_t* x, float* y, std::int64_t n);

// How a Bf16Gemm multiplies. Both compute the same thing, bf16 operands with float32
// accumulation (a product of two bf16 values is exact in float32), and differ only in
// summation order:
// - onednn: oneDNN's bf16 matmul (AVX512-BF16's vdpbf16ps, or AMX tiles where the CPU has
//   them). vdpbf16ps flushes subnormal operands and results to zero.
// - widened: the operands rounded and kept as the float32 values they are, then the float32
//   sgemm (kernels/cpu/gemm.hpp). Where the CPU has no AMX this is the faster: on a Sapphire
//   Rapids class Xeon without AMX exposed, vdpbf16ps peaks at 88 GFLOP/s a core against the
//   float32 FMAs' 185 (bench/results/bf16_peak_cpu_2026-11-29.txt), and oneDNN's bf16 matmul
//   reached 150 GFLOP/s on two cores where the sgemm reaches 270.
enum class Bf16Kernel { onednn, widened };
// onednn where the CPU has AMX-BF16 (and the OS enabled its tile state) or is an AMD one with
// AVX512-BF16 (a Zen 4's GPT step ran 1.27x faster in bf16 than in float32 through it), else
// widened.
// CODISTILL_BF16_GEMM=onednn|widened overrides it (benchmarks compare the two); read on every
// call; an unknown value throws std::invalid_argument naming the valid ones.
Bf16Kernel default_bf16_kernel();
const char* bf16_kernel_name(Bf16Kernel k);

// An operand rounded once for two products (Bf16Gemm::round_operand): bf16 bits for the
// onednn kernel, the float32 values for the widened one; the other pointer is null.
struct Bf16Operand {
  const std::uint16_t* bits = nullptr;
  const float* values = nullptr;
};

// C[M,N] (+)= op(A) op(B) with A, B float32 rounded to bf16 and float32 accumulation, the
// layouts of cpu::gemm (row-major; op(A) = A[M,K] or A[K,M]^T, op(B) = B[K,N] or B[N,K]^T).
// One per queue (kernels/cpu/backend.cpp), never global: it owns its kernel's state (the
// oneDNN engine and the matmul primitives built per shape, building one costs far more than a
// small call; or the widened kernel's buffers) and the operand workspaces it reuses. Calls are serialized by a mutex (a
// queue is meant for one thread at a time; the mutex makes misuse slow, not wrong). The
// matmul threads over OpenMP (Debian's oneDNN is built on it, like the CPU backend): it
// takes omp_get_max_threads() (cpu::set_num_threads, the run's threads) when a shape's
// primitive is built, so a thread count set later reaches only shapes built later.
class Bf16Gemm {
 public:
  explicit Bf16Gemm(Bf16Kernel kernel = default_bf16_kernel());
  ~Bf16Gemm();
  Bf16Kernel kernel() const { return kernel_; }
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
            const float* B, bool accumulate, float* C);
  // The same with A already rounded (in A's layout, by this engine's round_operand): an
  // operand two products share (a gradient: dx = dy W and dW = dy^T x) is rounded once.
  void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const Bf16Operand& A,
            const float* B, bool accumulate, float* C);
  // A linear layer's forward in one matmul: y[M, N] = x[M, K] w[N, K]^T + b[N] on the
  // bf16-rounded x and w (b, float32, may be null), then relu(y) if `relu`; bias and relu in
  // the kernel's epilogue, no passes of their own. With `frozen_w` (QueueOptions::
  // frozen_params) the caller promises w's values never change while this engine lives:
  // w is rounded (and, by onednn, repacked into the layout its kernel reads) once, then kept, keyed by
  // its address and shape (a teacher's forward otherwise rounds and packs its weights on
  // every call). The promise covers the address too: no other array is placed at w while
  // this engine lives (a teacher's queue dies with its model). M, N, K >= 1.
  void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t M, std::int64_t N,
                      std::int64_t K, bool relu, bool frozen_w);
  // The same with w already bf16 (a forward-only model's weights held as bf16: Op::
  // linear_bf16_weights), read in place as stored, [N, K] rows: nothing packed or kept, so
  // the weights exist once in memory.
  void linear_forward(const float* x, const std::uint16_t* w, const float* b, float* y, std::int64_t M,
                      std::int64_t N, std::int64_t K, bool relu);
  // x rounded into the engine's shared-operand buffer; valid until the next round_operand.
  Bf16Operand round_operand(const float* x, std::int64_t n);
  // What multiplied last, for logs and benchmarks: oneDNN's name of the implementation it
  // chose ("brg:avx512_core_bf16", ...) or "widened:f32 sgemm"; empty before the first call.
  std::string implementation() const;

 private:
  void start_engine();
  // The linear forward's body: w as float32 (rounded, or packed once when frozen_w) or, where
  // w_bf16 is set, as stored.
  void run_linear(const float* x, const float* w, const std::uint16_t* w_bf16, const float* b, float* y,
                  std::int64_t M, std::int64_t N, std::int64_t K, bool relu, bool frozen_w);
  void multiply(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* A,
                const float* B, bool accumulate, float* C);
  struct State;
  Bf16Kernel kernel_;
  std::unique_ptr<State> s_;
};

// cpu::gemm's contract (alpha 1, beta 0 or 1) through `bf16` when it is set and T is float,
// else float32/float64 BLAS: the one switch the GEMM-carrying ops call.
template <class T>
void gemm_compute(Bf16Gemm* bf16, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                  const T* A, const T* B, bool accumulate, T* C);

}  // namespace codistill::kernels::cpu
