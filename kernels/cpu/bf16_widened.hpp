#pragma once
// The bf16 GEMM engine's widened kernel (bf16.hpp, Bf16Kernel::widened): operands rounded to
// bf16 and held as the float32 values they are (the low 16 bits zero), multiplied by the
// float32 sgemm (gemm.hpp). Internal to the engine (bf16.cpp).
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace codistill::kernels::cpu::widened {

// The engine's buffers, reused between calls (the engine's mutex guards them).
struct Workspace {
  std::vector<float> a, b, shared;         // rounded operands: A, B, the shared one
  std::vector<std::vector<float>> panels;  // per OpenMP thread: its panel of w, widened
  // Frozen weights (QueueOptions::frozen_params), rounded once to bf16 bits and kept: a
  // teacher's forward then widens a panel at a time, never all of w (2 bytes a weight held).
  std::map<std::tuple<const float*, std::int64_t, std::int64_t>, std::vector<std::uint16_t>> frozen;
};

// C[M,N] (+)= op(A) op(B), layouts of cpu::gemm, A as rounded values (a_values) or rounded
// here from a (one of them set), B rounded here.
void gemm(Workspace& ws, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
          const float* a_values, const float* B, bool accumulate, float* C);

// y[M,N] = x[M,K] w^T (+ b), relu(y) if `relu` (NaN -> 0, as the fused oneDNN epilogue), with
// w [N,K] given as float32 (w, rounded here), bf16 bits (w_bits) or float32 frozen (kept as bits
// in ws.frozen). N is cut in panels spread over the threads: each widens its panel of w into
// its own buffer and multiplies it, so the three forms run the same products on the same
// values (the same bits) and a bf16 w is never widened whole (a 50304 x 768 head would take
// 154 MB).
void linear_forward(Workspace& ws, const float* x, const float* w, const std::uint16_t* w_bits, bool frozen,
                    const float* b, float* y, std::int64_t M, std::int64_t N, std::int64_t K, bool relu);

}  // namespace codistill::kernels::cpu::widened
