#pragma once
// bfloat16 on the CPU: the rounding rule of mixed precision (kernels/ops.hpp, Compute::bf16)
// and the GEMM engine that multiplies bf16-rounded float32 operands with float32
// accumulation (oneDNN's matmul; Debian's OpenBLAS has no sbgemm).
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
// y[i] = bf16_rounded(x[i]) (the reference path's operands; y may alias x).
void round_values_to_bf16(const float* x, float* y, std::int64_t n);

// C[M,N] (+)= op(A) op(B) with A, B float32 rounded to bf16 and float32 accumulation, the
// layouts of cpu::gemm (row-major; op(A) = A[M,K] or A[K,M]^T, op(B) = B[K,N] or B[N,K]^T).
// One per queue (kernels/cpu/backend.cpp), never global: it owns the oneDNN engine, the
// matmul primitives built per shape (building one costs far more than a small call) and
// the bf16 operand workspaces it reuses between calls. Calls are serialized by a mutex (a
// queue is meant for one thread at a time; the mutex makes misuse slow, not wrong). The
// matmul threads over OpenMP (Debian's oneDNN is built on it, like the CPU backend): it
// takes omp_get_max_threads() (cpu::set_num_threads, the run's threads) when a shape's
// primitive is built, so a thread count set later reaches only shapes built later.
class Bf16Gemm {
 public:
  Bf16Gemm();
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
            const float* B, bool accumulate, float* C);
  // The same with A already rounded (bf16 bits in A's layout, from round_operand): an operand
  // two products share (a gradient: dx = dy W and dW = dy^T x) is rounded once.
  void gemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* A,
            const float* B, bool accumulate, float* C);
  // A linear layer's forward in one matmul: y[M, N] = x[M, K] w[N, K]^T + b[N] on the
  // bf16-rounded x and w (b, float32, may be null), then relu(y) if `relu`; bias and relu in
  // the kernel's epilogue, no passes of their own. With `frozen_w` (QueueOptions::
  // frozen_params) the caller promises w's values never change while this engine lives:
  // w is rounded and repacked into the layout the kernel reads once, then kept, keyed by
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
  const std::uint16_t* round_operand(const float* x, std::int64_t n);
  // oneDNN's name of the implementation it chose last ("brg:avx512_core_bf16", ...), for logs
  // and benchmarks; empty before the first call.
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
  std::unique_ptr<State> s_;
};

// cpu::gemm's contract (alpha 1, beta 0 or 1) through `bf16` when it is set and T is float,
// else float32/float64 BLAS: the one switch the GEMM-carrying ops call.
template <class T>
void gemm_compute(Bf16Gemm* bf16, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                  const T* A, const T* B, bool accumulate, T* C);

}  // namespace codistill::kernels::cpu
